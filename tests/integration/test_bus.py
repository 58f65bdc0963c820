"""The bus layer against a real nats-server with JetStream: dedupe, ack/nak/term mapping, the DLQ."""

import asyncio
import datetime as dt
import json

import pytest

from relaunch.common.consumers import Consumer
from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.serving import consume
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.schemas import DeadLetter, JobObserved

pytestmark = pytest.mark.integration
NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def observed(cluster: str, job_id: str = "1") -> JobObserved:
    return JobObserved(cluster=cluster, job_id=job_id, state="RUNNING", restarts=0, observed_at=NOW)


async def dlq_entries(bus: Bus, service: str) -> list[DeadLetter]:
    sub = await bus.js.subscribe(subjects.dlq(service), ordered_consumer=True)
    letters = []
    try:
        while True:
            msg = await sub.next_msg(timeout=0.5)
            letters.append(DeadLetter.model_validate_json(msg.data))
    except Exception:
        pass
    await sub.unsubscribe()
    return letters


async def run_consumer(bus, spec, handler, until, timeout=10.0):
    stop = asyncio.Event()
    task = asyncio.create_task(consume(bus, Consumer(bus.service, spec, JobObserved), handler, stop))
    try:
        async with asyncio.timeout(timeout):
            while not until():
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task


async def test_msg_id_makes_a_republish_harmless(test_stack, unique):
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    try:
        subject = subjects.signal_job(f"c{unique}", "1")
        assert await bus.publish(subject, observed(f"c{unique}"), msg_id=f"id-{unique}") is True
        assert await bus.publish(subject, observed(f"c{unique}"), msg_id=f"id-{unique}") is False
    finally:
        await bus.close()


async def test_outcomes_map_to_ack_nak_and_dlq(test_stack, unique):
    service = f"t{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], service)
    cluster = f"c{unique}"
    spec = subjects.ConsumerSpec(f"test-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>",
                                 ack_wait_s=5, max_deliver=5)
    seen: dict[str, int] = {}

    async def handler(obs: JobObserved, delivery) -> None:
        seen[obs.job_id] = seen.get(obs.job_id, 0) + 1
        if obs.job_id == "2" and seen["2"] < 3:
            raise TemporaryError("not yet", delay=0.1)
        if obs.job_id == "3":
            raise PermanentError("refused on purpose")

    try:
        for job in ("1", "2", "3"):
            await bus.publish(subjects.signal_job(cluster, job), observed(cluster, job))
        await bus.js.publish(subjects.signal_job(cluster, "4"), b"{not json")
        await bus.js.publish(subjects.signal_job(cluster, "5"),
                             json.dumps({"schema": "relaunch.job_observed/v7", "cluster": cluster}).encode())
        await run_consumer(bus, spec, handler, lambda: seen.get("2", 0) >= 3 and "3" in seen)
        await asyncio.sleep(0.3)
        assert seen["1"] == 1, "a handled message is acked once, not redelivered"
        assert seen["2"] == 3, "TemporaryError naks and the message comes back"
        info = await bus.js.consumer_info(subjects.SIGNALS.name, spec.durable)
        assert info.num_ack_pending == 0 and info.num_pending == 0
        letters = await dlq_entries(bus, service)
        reasons = {letter.subject.rsplit(".", 1)[-1]: letter.reason for letter in letters}
        assert reasons["3"] == "refused on purpose"
        assert "not a valid JobObserved" in reasons["4"] and "not a valid JobObserved" in reasons["5"]
        assert letters[0].payload_bytes > 0
    finally:
        await bus.close()


async def test_a_handler_bug_is_dead_lettered_after_max_deliver(test_stack, unique):
    service = f"t{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], service)
    cluster = f"c{unique}"
    spec = subjects.ConsumerSpec(f"test-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>",
                                 ack_wait_s=5, max_deliver=2)
    calls = []

    async def handler(obs, delivery):
        calls.append(delivery.num_delivered)
        raise RuntimeError("boom")

    try:
        await bus.publish(subjects.signal_job(cluster, "1"), observed(cluster))
        await run_consumer(bus, spec, handler, lambda: len(calls) >= 2)
        await asyncio.sleep(0.3)
        letters = await dlq_entries(bus, service)
        assert calls == [1, 2] and len(letters) == 1 and "RuntimeError: boom" in letters[0].reason
    finally:
        await bus.close()


async def test_a_message_still_temporary_at_max_deliver_is_dead_lettered_not_dropped(test_stack, unique):
    """NATS stops delivering a message after the consumer's max_deliver: a handler that kept saying "not
    yet" (a server away longer than the consumer waits) leaves it in the DLQ with the reason."""
    service = f"t{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], service)
    cluster = f"c{unique}"
    spec = subjects.ConsumerSpec(f"test-{unique}", subjects.SIGNALS, f"relaunch.signal.job.{cluster}.>",
                                 ack_wait_s=5, max_deliver=3)
    calls = []

    async def handler(obs, delivery):
        calls.append(delivery.num_delivered)
        raise TemporaryError("the stream has no leader yet", delay=0.05)

    try:
        await bus.publish(subjects.signal_job(cluster, "1"), observed(cluster))
        await run_consumer(bus, spec, handler, lambda: len(calls) >= 3)
        await asyncio.sleep(0.3)
        letters = await dlq_entries(bus, service)
        assert calls == [1, 2, 3] and len(letters) == 1
        assert "still temporary after 3 deliveries" in letters[0].reason and "no leader yet" in letters[0].reason
    finally:
        await bus.close()
