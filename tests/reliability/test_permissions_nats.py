"""Least privilege on the bus: each relaunch NATS user is refused outside its permissions, and can do
what its service needs (a private nats-server with the config scripts/stack.sh generates)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys

import nats.errors
import pytest
from faults import ONE_RELEASE, SLURM
from natsprivate import CLUSTER, Client, PrivateNats, port

from relaunch.common import consumers
from relaunch.common.consumers import Consumer
from relaunch.common import natsauth, subjects
from relaunch.common.connection import Bus, connect_options
from relaunch.common.outcomes import Delivery
from relaunch.common.serving import consume
from relaunch.common.schemas import (Advice, AuditEntry, FaultInjection, InjectionAck, LogBatch, NodeHealth,
                                     ReconcileStatus, dump)
from relaunch.common.settings import CommonSettings
from nats.js.api import ConsumerConfig, DeliverPolicy
from relaunch.api.adapters.events import EventSubscription
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.handlers import Probe, ProbeConfig
from relaunch.gpu_probe.router import router as probe_router

# a private NATS with the stack's permissions: nothing here touches Slurm
pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(SLURM != ONE_RELEASE, reason="NATS permissions do not depend on Slurm: checked on one release")]

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SERVICE_USERS = [*natsauth.SERVICES, "cli", "gpu-probe-node1", "gpu-probe-node2"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = PrivateNats(tmp_path_factory.mktemp("nats-perms"), port(0)).start()
    # Streams come from the admin setup step, as in scripts/stack.sh.
    subprocess.run([sys.executable, "-m", "relaunch.common.natsauth", "setup"], check=True, timeout=60,
                   env={**os.environ, **srv.env("admin")})
    yield srv
    srv.stop()


async def bus_as(server: PrivateNats, user: str) -> Bus:
    settings = CommonSettings(nats_user=user, nats_password_file=str(server.creds / f"{user}.pass"))
    return await Bus.connect(server.url, user, wait_s=5, options=connect_options(settings))


async def request_once_served(client, subject: str, payload: bytes, within_s: float = 5.0):
    """A request that is asked again while nobody answers yet: on a loaded machine the server may see
    the request before it registered the responder's subscription, even after the responder's flush
    (seen twice in CI: "no responders"). Still fails when no responder comes within `within_s`."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        try:
            return await client.nc.request(subject, payload, timeout=3)
        except nats.errors.NoRespondersError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


def advice(job: str) -> Advice:
    return Advice(cluster=CLUSTER, job_id=job, attempt=0, generation=1, operation="restart", reason="test",
                  issued_at=NOW, expires_at=NOW + dt.timedelta(days=3650))


def test_passwords_are_private_files(server):
    assert oct(server.creds.stat().st_mode & 0o777) == "0o700"
    for path in server.creds.iterdir():
        assert oct(path.stat().st_mode & 0o777) == "0o600", path


async def test_a_wrong_password_is_refused(server):
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(server.url, user="decider", password="guessed", allow_reconnect=False,
                           max_reconnect_attempts=1)


async def test_services_use_the_streams_but_only_admin_creates_or_changes_them(server):
    detector = await bus_as(server, "detector")  # Bus.connect reads every stream's settings: allowed
    errors: list[str] = []
    detector.nc._error_cb = _collect(errors)
    client = Client(detector.nc, errors)
    try:
        assert (await detector.js.stream_info(subjects.ADVICE.name)).config.name == subjects.ADVICE.name
        for api in ("$JS.API.STREAM.CREATE.SNEAKY", f"$JS.API.STREAM.DELETE.{subjects.ADVICE.name}",
                    f"$JS.API.STREAM.UPDATE.{subjects.ADVICE.name}", f"$JS.API.STREAM.PURGE.{subjects.DLQ.name}"):
            with pytest.raises(nats.errors.TimeoutError):
                await detector.nc.request(api, b"{}", timeout=0.2)
            assert await client.refused("publish", api), (api, errors)
    finally:
        await detector.close()


def _collect(errors: list[str]):
    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))
    return on_error


@pytest.mark.parametrize("user", [u for u in SERVICE_USERS if u != "decider"])
async def test_only_the_decider_publishes_advice(server, user):
    subject = subjects.advice(CLUSTER, "4242")
    decider, admin = await bus_as(server, "decider"), await bus_as(server, "admin")
    other = await Client.connect(server, user)
    try:
        assert await decider.publish(subject, advice("4242"), msg_id=f"perm-{user}")
        before = (await admin.js.get_last_msg(subjects.ADVICE.name, subject)).seq
        await other.nc.publish(subject, dump(advice("4242")))
        await other.nc.flush()
        assert await other.refused("publish", subject)
        assert (await admin.js.get_last_msg(subjects.ADVICE.name, subject)).seq == before, "nothing landed"
    finally:
        for conn in (decider, admin, other):
            await conn.close()


@pytest.mark.parametrize("user", [u for u in SERVICE_USERS if u != "actuator"])
async def test_only_the_actuator_consumes_advice(server, user):
    other = await Client.connect(server, user)
    s, d = subjects.ADVICE.name, subjects.ACTUATOR_ADVICE.durable
    try:
        for api in (f"$JS.API.CONSUMER.MSG.NEXT.{s}.{d}", f"$JS.API.CONSUMER.DURABLE.CREATE.{s}.{user}",
                    f"$JS.API.CONSUMER.CREATE.{s}", f"$JS.API.CONSUMER.INFO.{s}.{d}"):
            with pytest.raises(nats.errors.TimeoutError):
                await other.nc.request(api, b"{}", timeout=0.2)
            assert await other.refused("publish", api), api
        ack = f"$JS.ACK.{s}.{d}.1.1.1.1.0"
        await other.nc.publish(ack, b"+ACK")
        await other.nc.flush()
        assert await other.refused("publish", ack)
        if user != "cli":  # the CLI may watch Advice live (`relaunch events tail`), not consume
            await other.nc.subscribe(subjects.ALL_ADVICE)
            await other.nc.flush()
            assert await other.refused("subscription", subjects.ALL_ADVICE)
    finally:
        await other.close()


async def test_the_cli_user_reads_no_log_line_progress_report_or_dead_letter(server):
    """Every training process of every user holds `cli` (issue 35, docs/security.md): it may follow events,
    Advice, job observations and node health, never another job's log lines, progress reports (whose keys
    bind them to their job) or dead letters (which quote the messages they hold)."""
    cli = await Client.connect(server, "cli")
    try:
        for subject in (subjects.ALL_SIGNAL_LOG, subjects.ALL_SIGNAL_PROGRESS, "relaunch.dlq.>", "relaunch.>",
                        subjects.signal_log(CLUSTER, "7")):
            await cli.nc.subscribe(subject)
            await cli.nc.flush()
            assert await cli.refused("subscription", subject), subject
        for subject in ("relaunch.event.>", subjects.ALL_ADVICE, "relaunch.signal.job.>", "relaunch.signal.node.>"):
            await cli.nc.subscribe(subject)
            await cli.nc.flush()
            assert not await cli.refused("subscription", subject, timeout=0.5), subject
    finally:
        await cli.close()


async def test_the_actuator_consumes_and_acks_advice(server):
    decider, actuator = await bus_as(server, "decider"), await bus_as(server, "actuator")
    errors: list[str] = []
    actuator.nc._error_cb = _collect(errors)
    got: asyncio.Queue[Advice] = asyncio.Queue()

    async def handle(body: Advice, delivery: Delivery) -> None:
        got.put_nowait(body)

    stop = asyncio.Event()
    task = asyncio.create_task(consume(actuator, consumers.ACTUATOR_ADVICE, handle, stop))
    try:
        await decider.publish(subjects.advice(CLUSTER, "777"), advice("777"), msg_id="perm-consume-777")
        while (await asyncio.wait_for(got.get(), 15)).job_id != "777":
            pass
        # Newest Advice of the job, as the actuator reads it before acting.
        last = await actuator.js.get_last_msg(subjects.ADVICE.name, subjects.advice(CLUSTER, "777"))
        assert Advice.model_validate_json(last.data).job_id == "777"
        admin = await bus_as(server, "admin")
        for _ in range(50):
            info = await admin.js.consumer_info(subjects.ADVICE.name, subjects.ACTUATOR_ADVICE.durable)
            if info.num_ack_pending == 0:
                break
            await asyncio.sleep(0.1)
        assert info.num_ack_pending == 0 and info.num_pending == 0, "the actuator's ack was accepted"
        await admin.close()
        assert not errors, errors
    finally:
        stop.set()
        await task
        await decider.close()
        await actuator.close()


@pytest.mark.parametrize("user", ["detector", "decider"])
async def test_each_service_uses_its_own_durables_and_no_other(server, user):
    bus = await bus_as(server, user)
    errors: list[str] = []
    bus.nc._error_cb = _collect(errors)
    try:
        stop = asyncio.Event()

        async def handle(body, delivery) -> None:
            pass

        asyncio.get_running_loop().call_later(1.0, stop.set)
        # Creates, binds and pulls from each of its durables (nothing there to take).
        await asyncio.gather(*(consume(bus, Consumer(user, spec, LogBatch), handle, stop) for spec in natsauth.CONSUMERS[user]))
        for spec in natsauth.CONSUMERS[user]:
            assert (await bus.js.consumer_info(spec.stream.name, spec.durable)).config.durable_name == spec.durable
        assert not errors, errors
        foreign = [s for u, specs in natsauth.CONSUMERS.items() if u != user for s in specs]
        client = Client(bus.nc, errors)
        for spec in foreign:
            api = f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream.name}.{spec.durable}"
            with pytest.raises(nats.errors.TimeoutError):
                await bus.nc.request(api, b"{}", timeout=0.2)
            assert await client.refused("publish", api)
    finally:
        await bus.close()


async def test_a_probe_publishes_and_answers_only_for_its_own_node(server):
    probe = await bus_as(server, "gpu-probe-node1")
    errors: list[str] = []
    probe.nc._error_cb = _collect(errors)
    client = Client(probe.nc, errors)
    cli = await Client.connect(server, natsauth.OPERATOR)  # who may inject (docs/security.md)
    try:
        health = NodeHealth(cluster=CLUSTER, node="node1", verdict="healthy", backend="fake", at=NOW)
        assert await probe.publish(subjects.signal_node(CLUSTER, "node1"), health)
        other = subjects.signal_node(CLUSTER, "node2")
        await probe.nc.publish(other, dump(health))
        await probe.nc.flush()
        assert await client.refused("publish", other)
        await probe.nc.subscribe(subjects.control_inject(CLUSTER, "node2"))
        await probe.nc.flush()
        assert await client.refused("subscription", subjects.control_inject(CLUSTER, "node2"))
        # Its own inject requests it may answer (a reply subject of a request it received).

        async def answer(msg) -> None:
            await msg.respond(b"ok")

        await probe.nc.subscribe(subjects.control_inject(CLUSTER, "node1"), cb=answer)
        await probe.nc.flush()
        reply = await request_once_served(cli, subjects.control_inject(CLUSTER, "node1"), b"{}")
        assert reply.data == b"ok"
        # ...but not publish to another user's inbox on its own.
        await probe.nc.publish("_INBOX_operator.forged", b"x")
        await probe.nc.flush()
        assert await client.refused("publish", "_INBOX_operator.forged")
    finally:
        await probe.close()
        await cli.close()


async def test_a_probe_answers_the_operators_inject_request_through_its_faststream_router(server):
    """The declared responder (consumers.PROBE_INJECT) as the probe runs it, as its own NATS user: the
    reply reaches the operator's private inbox (`_INBOX_operator.`), which only allow_responses lets it
    publish to. The shared `cli` user, which every training process holds, may not inject (issue 35)."""
    bus = await bus_as(server, "gpu-probe-node1")
    probe = Probe(bus, FakeNvml(8), ProbeConfig(cluster=CLUSTER, node="node1", expected_gpus=8, interval_s=60))
    cli = await Client.connect(server, natsauth.OPERATOR)
    training = await Client.connect(server, "cli")
    try:
        await bus.serve(probe_router(probe))
        request = FaultInjection(cluster=CLUSTER, node="node1", fault="ecc", gpu=2, requested_at=NOW)
        await training.nc.publish(subjects.control_inject(CLUSTER, "node1"), dump(request), reply="_INBOX_cli.x")
        await training.nc.flush()
        assert await training.refused("publish", subjects.control_inject(CLUSTER, "node1"))
        reply = await request_once_served(cli, subjects.control_inject(CLUSTER, "node1"), dump(request))
        assert reply.subject.startswith(f"{natsauth.inbox_prefix(natsauth.OPERATOR)}.")
        ack = InjectionAck.model_validate_json(reply.data)
        assert ack.accepted and (ack.cluster, ack.node) == (CLUSTER, "node1"), ack
        refused = InjectionAck.model_validate_json(
            (await cli.nc.request(subjects.control_inject(CLUSTER, "node1"), b"{not json", timeout=3)).data)
        assert not refused.accepted and "not a valid FaultInjection" in refused.detail
    finally:
        await bus.close()
        await cli.close()
        await training.close()


async def test_the_apis_live_reader_is_a_faststream_subscriber_its_user_may_run(server):
    """The declared reader (consumers.API_EVENTS) as the API runs it, as the api user: an ordered
    consumer from a sequence, its messages handed over in order, nothing acked, nothing refused."""
    api = await bus_as(server, "api")
    errors: list[str] = []
    api.nc._error_cb = _collect(errors)
    admin = await bus_as(server, "admin")
    sub = None
    try:
        # Reconcile statuses (the actuator's, published here by admin): no other test reads job 6's.
        subject = subjects.event_reconcile(CLUSTER, "6")
        statuses = [ReconcileStatus(cluster=CLUSTER, job_id="6", generation=1, status="PENDING",
                                    reason=f"step {i}", at=NOW) for i in range(3)]
        for i, status in enumerate(statuses):
            await admin.publish(subject, status, msg_id=f"perm-api-reader-{i}")
        first = (await admin.last_message(subjects.EVENTS, subject))[1] - 2
        sub = EventSubscription(api, subject,
                                ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first))
        await sub.start()
        got = [await sub.next(timeout=3) for _ in statuses]
        assert [e.seq for e in got] == [first, first + 1, first + 2]
        assert [ReconcileStatus.model_validate_json(e.data).reason for e in got] == [s.reason for s in statuses]
        assert await sub.next(timeout=0.3) is None
        assert not errors, errors
    finally:
        if sub is not None:
            await sub.close()
        await api.close()
        await admin.close()


async def test_the_api_reads_events_and_publishes_only_audit_entries(server):
    api = await bus_as(server, "api")
    errors: list[str] = []
    api.nc._error_cb = _collect(errors)
    client = Client(api.nc, errors)
    admin = await bus_as(server, "admin")
    try:
        sub = await api.js.subscribe(subjects.ALL_AUDIT, stream=subjects.EVENTS.name, ordered_consumer=True)
        entry = AuditEntry(cluster=CLUSTER, job_id="5", service="api", action="override", idempotency_key="k5", at=NOW)
        assert await api.publish(subjects.event_audit(CLUSTER, "5"), entry, msg_id="perm-api-audit")
        msg = await sub.next_msg(timeout=5)
        assert AuditEntry.model_validate_json(msg.data).idempotency_key == "k5"
        await sub.unsubscribe()
        assert not errors, errors  # reading live events needed nothing it lacks
        for subject in (subjects.signal_job(CLUSTER, "5"), subjects.advice(CLUSTER, "5"),
                        subjects.event_anomaly(CLUSTER, "5"), subjects.event_reconcile(CLUSTER, "5"),
                        subjects.signal_progress(CLUSTER, "5")):
            await api.nc.publish(subject, b"{}")
            await api.nc.flush()
            assert await client.refused("publish", subject), subject
        durable = subjects.DECIDER_ANOMALIES
        for api_subject in (f"$JS.API.CONSUMER.DELETE.{durable.stream.name}.{durable.durable}",
                            f"$JS.API.CONSUMER.CREATE.{durable.stream.name}.{durable.durable}.{durable.filter_subject}",
                            f"$JS.API.CONSUMER.MSG.NEXT.{durable.stream.name}.{durable.durable}"):
            with pytest.raises(nats.errors.TimeoutError):
                await api.nc.request(api_subject, b"{}", timeout=0.2)
            assert await client.refused("publish", api_subject), api_subject
        # The one create it may send is for unnamed ephemerals: the server refuses a durable through it.
        request = {"stream_name": durable.stream.name,
                   "config": {"durable_name": durable.durable, "ack_policy": "none",
                              "filter_subject": subjects.ALL_EVENTS}}
        reply = await api.nc.request(f"$JS.API.CONSUMER.CREATE.{durable.stream.name}", json.dumps(request).encode(),
                                     timeout=2)
        assert "error" in json.loads(reply.data), reply.data
    finally:
        await api.close()
        await admin.close()


@pytest.mark.parametrize("user", ["detector", "gpu-probe-node1", "cli"])
async def test_nobody_reads_another_users_replies(server, user):
    client = await Client.connect(server, user)
    try:
        for inbox in ("_INBOX.>", "_INBOX_decider.>", "_INBOX_actuator.>"):
            await client.nc.subscribe(inbox)
            await client.nc.flush()
            assert await client.refused("subscription", inbox), inbox
    finally:
        await client.close()
