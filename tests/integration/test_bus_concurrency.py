"""The bus layer's batch and per-subject consumers against a real nats-server: each message of a
batch gets its own ack/nak/DLQ outcome, and per-subject handling keeps one subject's order while
different subjects run at once."""

import asyncio
import datetime as dt

import pytest

from relaunch.common.consumers import Consumer
from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.ingest import consume_batch
from relaunch.common.serving import consume
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.schemas import DeadLetter, JobObserved

pytestmark = pytest.mark.integration
NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def observed(cluster: str, job_id: str, restarts: int = 0) -> JobObserved:
    return JobObserved(cluster=cluster, job_id=job_id, state="RUNNING", restarts=restarts, observed_at=NOW)


async def dlq_reasons(bus: Bus, service: str) -> list[str]:
    sub = await bus.js.subscribe(subjects.dlq(service), ordered_consumer=True)
    reasons = []
    try:
        while True:
            reasons.append(DeadLetter.model_validate_json((await sub.next_msg(timeout=0.5)).data).reason)
    except Exception:
        pass
    await sub.unsubscribe()
    return reasons


async def until(condition, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


async def test_each_message_of_a_batch_gets_its_own_outcome(test_stack, unique):
    service, cluster = f"t{unique}", f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], service)
    spec = subjects.ConsumerSpec(f"batch-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>", 5, 5)
    for job in ("1", "2", "3"):
        await bus.publish(subjects.signal_job(cluster, job), observed(cluster, job))
    await bus.js.publish(subjects.signal_job(cluster, "4"), b'{"schema": "relaunch.job_observed/v1"}')
    seen: list[list[str]] = []

    async def handler(items):
        seen.append([body.job_id for body, _ in items])
        out = []
        for body, delivery in items:
            if body.job_id == "2" and delivery.num_delivered == 1:
                out.append(TemporaryError("later", delay=0.2))  # handled again on redelivery
            elif body.job_id == "3":
                out.append(PermanentError("job 3 is refused"))
            else:
                out.append(None)
        return out

    stop = asyncio.Event()
    task = asyncio.create_task(consume_batch(bus, Consumer(bus.service, spec, JobObserved, batch=256), handler, stop))
    try:
        await until(lambda: sum(j.count("2") for j in seen) >= 2)
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await task
    try:
        assert seen[0] == ["1", "2", "3"], "one batch, in stream order, without the body that does not parse"
        assert [j for batch in seen[1:] for j in batch] == ["2"], "only the nak'ed message comes back"
        info = await bus.js.consumer_info(spec.stream.name, spec.durable)
        assert info.num_pending == 0 and info.num_ack_pending == 0
        reasons = await dlq_reasons(bus, service)
        assert len(reasons) == 2
        assert any("job 3 is refused" in r for r in reasons)
        assert any("not a valid JobObserved" in r for r in reasons)
    finally:
        await bus.close()


async def test_a_batch_handler_that_raises_retries_every_message(test_stack, unique):
    cluster = f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    spec = subjects.ConsumerSpec(f"raise-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>", 5, 5)
    for job in ("1", "2"):
        await bus.publish(subjects.signal_job(cluster, job), observed(cluster, job))
    calls: list[list[str]] = []

    async def handler(items):
        calls.append([body.job_id for body, _ in items])
        if len(calls) == 1:
            raise TemporaryError("Redis is down", delay=0.2)
        return [None] * len(items)

    stop = asyncio.Event()
    task = asyncio.create_task(consume_batch(bus, Consumer(bus.service, spec, JobObserved, batch=256), handler, stop))
    try:
        await until(lambda: sorted(j for c in calls[1:] for j in c) == ["1", "2"])
    finally:
        stop.set()
        await task
        await bus.close()


async def test_per_subject_keeps_each_subjects_order_and_runs_subjects_at_once(test_stack, unique):
    cluster = f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    spec = subjects.ConsumerSpec(f"lanes-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>", 5, 5)
    for restarts in range(4):
        for job in ("1", "2", "3"):
            await bus.publish(subjects.signal_job(cluster, job), observed(cluster, job, restarts))
    order: dict[str, list[int]] = {}
    running = {"now": 0, "most": 0}

    async def handler(obs, delivery):
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.05)  # a round trip to a store
        order.setdefault(obs.job_id, []).append(obs.restarts)
        running["now"] -= 1

    stop = asyncio.Event()
    task = asyncio.create_task(consume(bus, Consumer(bus.service, spec, JobObserved, per_subject=True), handler, stop))
    try:
        await until(lambda: sum(map(len, order.values())) == 12)
    finally:
        stop.set()
        await task
        await bus.close()
    assert order == {"1": [0, 1, 2, 3], "2": [0, 1, 2, 3], "3": [0, 1, 2, 3]}
    assert running["most"] > 1, "different jobs are handled at the same time"


async def test_batches_pulled_while_messages_trickle_in_hand_each_message_out_once(test_stack, unique):
    """consume_batch's own pull requests (BatchPuller): messages published in bursts and trickles,
    some while a waiting request is open and some after one expired, each reach the handler exactly
    once, in stream order, and all are acknowledged."""
    cluster = f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    spec = subjects.ConsumerSpec(f"trickle-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>", 30, 5)
    seen: list[tuple[int, int]] = []
    sizes: list[int] = []

    async def handler(items):
        sizes.append(len(items))
        seen.extend((int(body.job_id), delivery.num_delivered) for body, delivery in items)
        return [None] * len(items)

    n = 0

    async def publish(count: int) -> None:
        nonlocal n
        for _ in range(count):
            n += 1
            await bus.publish(subjects.signal_job(cluster, str(n)), observed(cluster, str(n)))

    await publish(50)  # a backlog before the consumer starts: full batches
    stop = asyncio.Event()
    task = asyncio.create_task(consume_batch(bus, Consumer(bus.service, spec, JobObserved, batch=16), handler, stop))
    try:
        for burst, pause in ((40, 0.0), (1, 0.7), (3, 0.05), (100, 0.0), (1, 1.2), (20, 0.3)):
            await publish(burst)
            await asyncio.sleep(pause)
        await until(lambda: len(seen) >= n, timeout=15)
        await asyncio.sleep(1.0)  # nothing more may come
    finally:
        stop.set()
        await task
    try:
        assert [job for job, _ in seen] == list(range(1, n + 1))
        assert {delivered for _, delivered in seen} == {1}, "nothing was redelivered"
        assert sizes[:3] == [16, 16, 16] and max(sizes) == 16
        info = await bus.js.consumer_info(spec.stream.name, spec.durable)
        assert info.num_pending == 0 and info.num_ack_pending == 0
    finally:
        await bus.close()
