"""One recovery is one trace: the W3C trace context travels in NATS headers through the consumers,
and through the decider's outbox (recorded with the row, sent when the Advice is published)."""

import asyncio
import datetime as dt

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from relaunch.common.consumers import Consumer
from relaunch.common import subjects, telemetry
from relaunch.common.connection import Bus
from relaunch.common.serving import consume
from relaunch.common.schemas import AnomalyDetected, JobObserved

pytestmark = pytest.mark.integration
EXPORTER = InMemorySpanExporter()
NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module", autouse=True)
def provider():
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(SimpleSpanProcessor(EXPORTER))
    yield


def observed(cluster, job="1"):
    return JobObserved(cluster=cluster, job_id=job, state="RUNNING", restarts=0, observed_at=NOW)


async def test_trace_context_crosses_two_consumers(test_stack, unique):
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    cluster = f"c{unique}"
    first = subjects.ConsumerSpec(f"first-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.1", 5, 3)
    second = subjects.ConsumerSpec(f"second-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.2", 5, 3)
    seen: list[int] = []

    async def relay(obs, delivery):  # as the detector does: handle one message, publish another
        await bus.publish(subjects.signal_job(cluster, "2"), observed(cluster, "2"))

    async def record(obs, delivery):
        seen.append(trace.get_current_span().get_span_context().trace_id)

    stop = asyncio.Event()
    tasks = [asyncio.create_task(consume(bus, Consumer(bus.service, spec, JobObserved), h, stop)) for spec, h in ((first, relay),
                                                                                           (second, record))]
    try:
        with telemetry.tracer().start_as_current_span("anomaly") as root:
            await bus.publish(subjects.signal_job(cluster, "1"), observed(cluster))
        async with asyncio.timeout(10):
            while not seen:
                await asyncio.sleep(0.05)
        assert seen == [root.get_span_context().trace_id]
        names = {s.name for s in EXPORTER.get_finished_spans() if s.context.trace_id == seen[0]}
        assert {f"first-{unique} JobObserved", f"second-{unique} JobObserved"} <= names
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await bus.close()


async def test_the_outbox_continues_the_decisions_trace(test_stack, unique):
    import asyncpg

    from relaunch.common.outcomes import Delivery
    from relaunch.decider.adapters.ledger import Ledger
    from relaunch.decider.handlers import Decider
    from relaunch.decider.outbox import OutboxPublisher

    base = test_stack["RELAUNCH_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"CREATE DATABASE trace_{unique}")
    ledger = await Ledger.connect(base.rsplit("/", 1)[0] + f"/trace_{unique}")
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    cluster = f"c{unique}"
    try:
        await ledger.migrate()
        outbox = OutboxPublisher(bus, ledger)
        decider = Decider(ledger, outbox)
        obs = JobObserved(cluster=cluster, job_id="5", state="RUNNING", restarts=0, nodes=["node1"],
                          comment="relaunch:max_attempts=2", observed_at=NOW)
        await decider.on_job(obs, Delivery("s", 1, 1))
        anomaly = AnomalyDetected(anomaly_id=f"{cluster}.5.0.crash", cluster=cluster, job_id="5", attempt=0,
                                  kind="crash", source="log", signature_id="segfault", category="segfault",
                                  fault_domain="unknown", action="restart", summary="s", detected_at=NOW)
        with telemetry.tracer().start_as_current_span("decide") as root:
            await decider.on_anomaly(anomaly, Delivery("s", 1, 2))
        assert await outbox.publish_pending() == 2  # the Advice and its audit entry, outside the decision's span
        msg = await bus.js.get_last_msg(subjects.ADVICE.name, subjects.advice(cluster, "5"))
        assert f"{root.get_span_context().trace_id:032x}" in msg.headers[telemetry.TRACEPARENT]
    finally:
        await bus.close()
        await ledger.close()
        await admin.execute(f"DROP DATABASE trace_{unique}")
        await admin.close()
