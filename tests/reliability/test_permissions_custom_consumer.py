"""A declared custom consumer on a private nats-server with the generated config (issue 39): the admin's
setup makes its durable as declared, its user reads and acks that durable through relaunch.client, and NATS
refuses it everything else (tests/e2e/test_custom_consumer.py runs the page's programs on the full stack)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import nats.errors
import pytest
from faults import ONE_RELEASE, SLURM
from natsprivate import Client, PrivateNats, port
from nats.js.api import AckPolicy, ConsumerConfig

from relaunch.common import subjects
from relaunch.common.schemas import Advice, dump

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(SLURM != ONE_RELEASE, reason="NATS permissions do not depend on Slurm: checked on one release")]

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DECLARED = [{"name": "advice-webhook", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]},
            {"name": "restarts-db", "stream": "EVENTS", "filterSubjects": ["relaunch.event.reconcile.>"], "ack": False}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ["RELAUNCH_CUSTOM_CONSUMERS"] = json.dumps(DECLARED)  # what scripts/stack.sh hands to natsauth
    try:
        srv = PrivateNats(tmp_path_factory.mktemp("nats-custom"), port(3)).start()
        subprocess.run([sys.executable, "-m", "relaunch.common.natsauth", "setup"], check=True, timeout=60,
                       env={**os.environ, **srv.env("admin")})
    finally:
        del os.environ["RELAUNCH_CUSTOM_CONSUMERS"]
    yield srv
    srv.stop()


def advice(job: str) -> bytes:
    return dump(Advice(cluster="permtest", job_id=job, attempt=0, generation=1, operation="restart", reason="test",
                       issued_at=NOW, expires_at=NOW + dt.timedelta(days=3650)))


async def test_setup_makes_each_durable_as_declared(server):
    admin = await Client.connect(server, "admin")
    js = admin.nc.jetstream()
    webhook = await js.consumer_info("ADVICE", "advice-webhook")
    reader = await js.consumer_info("EVENTS", "restarts-db")
    await admin.close()
    assert (webhook.config.filter_subject, webhook.config.ack_policy, webhook.config.max_deliver) == (
        "relaunch.advice.>", AckPolicy.EXPLICIT, 20)
    assert (reader.config.filter_subject, reader.config.ack_policy) == ("relaunch.event.reconcile.>", AckPolicy.NONE)


async def test_the_declared_user_pulls_and_acks_its_durable_through_the_client(server, monkeypatch):
    from relaunch import client

    for key, value in server.env("advice-webhook").items():
        monkeypatch.setenv(key, value)
    admin = await Client.connect(server, "admin")
    await admin.nc.jetstream().publish(subjects.advice("permtest", "41"), advice("41"))
    nc = await client.connect()
    sub = await nc.jetstream().pull_subscribe_bind("advice-webhook", stream="ADVICE", inbox_prefix=client.pull_inbox())
    (msg,) = await sub.fetch(1, timeout=5)
    assert isinstance(client.decode(msg.data), Advice)
    await msg.ack_sync()
    info = await admin.nc.jetstream().consumer_info("ADVICE", "advice-webhook")
    await nc.close()
    await admin.close()
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, msg.metadata.sequence.stream)


async def _js_refused(call) -> bool:
    try:
        await call
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError):
        return True
    return False


async def test_nats_refuses_the_declared_users_everything_outside_their_declaration(server):
    me = await Client.connect(server, "advice-webhook")
    js = me.nc.jetstream(timeout=1)
    refused = {}
    await me.nc.subscribe(subjects.ALL_ADVICE)
    refused["core subscription to Advice"] = await me.refused("subscription", subjects.ALL_ADVICE)
    await me.nc.subscribe("_INBOX_actuator.>")
    refused["another user's inbox"] = await me.refused("subscription", "_INBOX_actuator.>")
    await me.nc.publish(subjects.advice("permtest", "1"), advice("1"))
    refused["publishing Advice"] = await me.refused("publish", subjects.advice("permtest", "1"))
    refused["the actuator's durable"] = await _js_refused(js.consumer_info("ADVICE", subjects.ACTUATOR_ADVICE.durable))
    refused["another stream's durable"] = await _js_refused(js.consumer_info("EVENTS", "restarts-db"))
    refused["creating a consumer"] = await _js_refused(js.add_consumer("ADVICE", ConsumerConfig(
        name="wider", durable_name="wider", filter_subject=subjects.ALL_ADVICE)))
    refused["widening its own durable"] = await _js_refused(js.add_consumer("ADVICE", ConsumerConfig(
        name="advice-webhook", durable_name="advice-webhook", filter_subject="relaunch.>")))
    await me.close()
    reader = await Client.connect(server, "restarts-db")
    await reader.nc.publish("$JS.ACK.EVENTS.restarts-db.1.1.1.1.1.0", b"")
    refused["an ack where it may not ack"] = await reader.refused("publish", "$JS.ACK.EVENTS.restarts-db.1.1.1.1.1.0")
    await reader.close()
    assert all(refused.values()), refused
