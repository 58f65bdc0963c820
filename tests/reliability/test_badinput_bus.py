"""Bad input on the bus: every subscriber of every service, fed malformed JSON, wrong schema versions,
unknown fields, wrong types and oversized bodies (hypothesis), dead-letters each one with its reason
and counts it, hands none of them to its handler, and goes on to process a valid message sent after
them. Runs the services' own consume paths (`consume`, or `consume_batch` where the service uses it)
with their consumer settings, against a real nats-server that accepts bodies larger than the
consumers' bound (so the bound itself is what refuses them)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from natsprivate import PrivateNats, port
from prometheus_client import REGISTRY
from pydantic import ValidationError

from relaunch.common import subjects
from relaunch.common.connection import Bus, connect_options
from relaunch.common import consumers
from relaunch.common.ingest import consume_batch, consume_each
from relaunch.common.bodies import MAX_BODY_BYTES
from relaunch.common.serving import consume
from relaunch.common.schemas import (
    Advice, AnomalyDetected, AuditEntry, CheckpointFact, DeadLetter, EvidenceLine, HangEvidence, JobObserved, LogBatch,
    Message,
    NodeHealth, ProgressReported, RankEvidence, ReconcileStatus, dump,
)
from relaunch.common.settings import CommonSettings

pytestmark = [pytest.mark.reliability, pytest.mark.one_release(seconds=5.5)]

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
C, J = "badin", "101"
EXAMPLES: dict[type[Message], Message] = {
    LogBatch: LogBatch(cluster=C, job_id=J, attempt=0, path="/x.out", offset=0, lines=["a", "b"], read_at=NOW),
    JobObserved: JobObserved(cluster=C, job_id=J, state="RUNNING", restarts=0, nodes=["node1"], observed_at=NOW,
                             comment="relaunch"),
    ProgressReported: ProgressReported(cluster=C, job_id=J, step=10, throughput=1.5, at=NOW),
    AnomalyDetected: AnomalyDetected(anomaly_id="a1", cluster=C, job_id=J, attempt=0, kind="crash", source="log",
                                     signature_id="s", category="c", fault_domain="hardware", action="restart",
                                     summary="x", evidence=[EvidenceLine(path="/x", offset=0, text="t")],
                                     detected_at=NOW),
    ReconcileStatus: ReconcileStatus(cluster=C, job_id=J, generation=1, status="PENDING", reason="r", at=NOW),
    AuditEntry: AuditEntry(cluster=C, job_id=J, service="s", action="a", idempotency_key="k", at=NOW),
    NodeHealth: NodeHealth(cluster=C, node="node1", verdict="healthy", backend="fake", at=NOW),
    Advice: Advice(cluster=C, job_id=J, attempt=0, generation=1, operation="restart", reason="r", issued_at=NOW,
                   expires_at=NOW),
    DeadLetter: DeadLetter(service="detector", subject=f"relaunch.signal.log.{C}.{J}", reason="not a valid LogBatch",
                           payload="{}", payload_bytes=2, at=NOW),
    HangEvidence: HangEvidence(anomaly_id="a1", cluster=C, job_id=J, attempt=0, status="collected", blame="node",
                               victims=[0], suspects=[1], suspect_nodes=["node2"], reason="rank 1 in a native call",
                               ranks=[RankEvidence(rank=1, node="node2", pid=42, role="suspect", where="native",
                                                   state="S", frames=["nanosleep (libc.so.6)"])],
                               collected_at=NOW),
    CheckpointFact: CheckpointFact(cluster=C, job_id=J, attempt=0, kind="saved", step=500, at=NOW, preset="megatron"),
}
# Every model a consumer takes has an example here (a new consumer's model too: otherwise its case fails on a KeyError).
assert {c.model for c in consumers.ALL} <= set(EXAMPLES), {c.model for c in consumers.ALL} - set(EXAMPLES)
# Every declared consumer (relaunch.common.consumers), run the way its service runs it.
SUBSCRIBERS = list(consumers.ALL)


def _how(consumer: consumers.Consumer):
    if consumer.engine == "faststream":
        return consume
    return consume_batch if consumer.spec.durable == "detector-progress" else consume_each


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                       lambda inner: (st.lists(inner, max_size=3)
                                      | st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                       max_leaves=8)


def _wire(model: type[Message]) -> dict:
    return json.loads(dump(EXAMPLES[model]))


def bad_bodies(model: type[Message]) -> st.SearchStrategy[tuple[str, bytes]]:
    fields = list(_wire(model))
    malformed = st.one_of(
        st.binary(max_size=300),  # junk, invalid UTF-8 included
        st.text(max_size=200).map(str.encode),
        st.just(dump(EXAMPLES[model])[:-1]),  # truncated JSON
        JSONISH.map(lambda v: json.dumps(v).encode()),  # JSON, but not an object of this type
    ).map(lambda b: ("malformed", b))
    wrong_schema = st.text(max_size=40).filter(lambda s: s != _wire(model)["schema"]).map(
        lambda s: ("schema", json.dumps({**_wire(model), "schema": s}).encode()))
    unknown = st.tuples(st.text(min_size=1, max_size=20).filter(lambda k: k not in fields), JSONISH).map(
        lambda kv: ("unknown", json.dumps({**_wire(model), kv[0]: kv[1]}).encode()))
    wrong_type = st.tuples(st.sampled_from(fields), st.one_of(
        st.lists(st.dictionaries(st.text(max_size=5), st.integers(), min_size=1), min_size=1),
        st.dictionaries(st.text(min_size=1, max_size=5), st.integers(), min_size=1),
        st.floats(allow_nan=False).map(lambda f: f + 0.5), st.booleans(), st.text(min_size=1, max_size=10))).map(
        lambda fv: ("type", json.dumps({**_wire(model), fv[0]: fv[1]}).encode()))
    return st.one_of(malformed, wrong_schema, unknown, wrong_type).filter(lambda kb: _invalid(model, kb[1]))


def _invalid(model: type[Message], body: bytes) -> bool:
    try:
        model.model_validate_json(body)
    except ValidationError:
        return True
    return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # The server takes bodies up to 4 MiB, so that an oversized one reaches the consumers' bound.
    srv = PrivateNats(tmp_path_factory.mktemp("nats-badinput"), port(1), extra="max_payload: 4MB").start()
    yield srv
    srv.stop()


def _dead_letters(service: str, durable: str) -> float:
    return REGISTRY.get_sample_value("relaunch_dead_letters_total", {"service": service, "consumer": durable}) or 0.0


async def scenario(server: PrivateNats, consumer: consumers.Consumer, bad: list[tuple[str, bytes]]) -> None:
    spec, model, how = consumer.spec, consumer.model, _how(consumer)
    u = uuid.uuid4().hex[:8]
    service = f"bad-{u}"
    filter_subject = spec.filter_subject[:-1] + f"b{u}.>"
    subject = filter_subject[:-1] + "101"
    spec = dataclasses.replace(spec, durable=f"{spec.durable}-{u}", filter_subject=filter_subject)
    consumer = dataclasses.replace(consumer, spec=spec)
    options = connect_options(CommonSettings(nats_user="admin", nats_password_file=str(server.creds / "admin.pass")))
    bus = await Bus.connect(server.url, service, wait_s=10, options=options)
    before = _dead_letters(service, spec.durable)
    valid = dump(EXAMPLES[model])
    handled: list[Message] = []
    got_valid = asyncio.Event()

    async def handle(body: Message, delivery) -> None:
        handled.append(body)
        got_valid.set()

    async def handle_batch(items) -> list:
        for body, _ in items:
            handled.append(body)
        got_valid.set()
        return [None] * len(items)

    try:
        for _, body in bad:
            await bus.js.publish(subject, body)
        await bus.js.publish(subject, valid)
        stop = asyncio.Event()
        task = asyncio.create_task(how(bus, consumer, handle_batch if how is consume_batch else handle, stop))
        try:
            await asyncio.wait_for(got_valid.wait(), 20)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        assert [dump(h) for h in handled] == [valid], "only the valid message reached the handler"
        assert _dead_letters(service, spec.durable) - before == len(bad)
        sub = await bus.js.subscribe(subjects.dlq(service), stream=subjects.DLQ.name, ordered_consumer=True)
        letters = [DeadLetter.model_validate_json((await sub.next_msg(timeout=5)).data) for _ in bad]
        for (kind, body), letter in zip(bad, letters, strict=True):
            assert letter.payload_bytes == len(body) and letter.subject == subject
            if kind == "oversized":
                assert letter.reason.startswith("oversized:"), letter.reason
            else:
                assert letter.reason.startswith(f"not a valid {model.__name__}: "), (kind, letter.reason)
    finally:
        await bus.nc.close()


@pytest.mark.parametrize("consumer", SUBSCRIBERS, ids=[f"{c.service}:{c.spec.durable}" for c in SUBSCRIBERS])
def test_every_subscriber_dead_letters_bad_input_and_keeps_processing(server, consumer):
    model = consumer.model
    oversized = ("oversized", dump(EXAMPLES[model]) + b" " * MAX_BODY_BYTES)  # valid JSON, just too big

    @settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.lists(bad_bodies(model), min_size=1, max_size=12))
    def run(bad):
        asyncio.run(scenario(server, consumer, [*bad, oversized]))

    run()
