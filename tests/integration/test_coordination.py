"""The actuator's coordination against real NATS KV and Redis: the leader lease, the hold registry
and the cluster-wide action rate limit."""

import asyncio
import time

import pytest

from relaunch.actuator.adapters.coordination import HoldRegistry, Lease
from relaunch.actuator.adapters.ratelimit import ActionRateLimit
from relaunch.common.connection import Bus
from relaunch.common.errors import TemporaryError

pytestmark = pytest.mark.integration


async def test_one_leader_and_a_standby_takes_over_within_10s(test_stack, unique):
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    a = Lease(bus.js, f"c{unique}", "a", ttl_s=6, renew_s=2)
    b = Lease(bus.js, f"c{unique}", "b", ttl_s=6, renew_s=2)
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    task_a = asyncio.create_task(a.run(stop_a))
    await asyncio.sleep(0.3)
    task_b = asyncio.create_task(b.run(stop_b))
    try:
        await asyncio.sleep(2.5)
        assert a.is_leader and not b.is_leader
        task_a.cancel()  # the leader dies without stepping down
        died = time.monotonic()
        while not b.is_leader:
            assert time.monotonic() - died < 10, "standby did not take over within 10 s"
            await asyncio.sleep(0.1)
    finally:
        stop_b.set()
        await asyncio.gather(task_a, task_b, return_exceptions=True)
        await bus.close()


async def test_hold_registry_round_trip(test_stack, unique):
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    holds = HoldRegistry(bus.js)
    try:
        await holds.record(f"c{unique}", "12", generation=2, attempt=0)
        (hold,) = [h for h in await holds.all() if h.cluster == f"c{unique}"]
        assert (hold.job_id, hold.generation, hold.attempt) == ("12", 2, 0)
        before = hold.touched_at
        await asyncio.sleep(0.05)
        await holds.touch(f"c{unique}", "12")
        (hold,) = [h for h in await holds.all() if h.cluster == f"c{unique}"]
        assert hold.touched_at > before
        await holds.forget(f"c{unique}", "12")
        assert [h for h in await holds.all() if h.cluster == f"c{unique}"] == []
        await holds.touch(f"c{unique}", "99")  # never held: touching creates nothing
        assert [h for h in await holds.all() if h.cluster == f"c{unique}"] == []
    finally:
        await bus.close()


async def test_rate_limit_is_shared_between_actuators(test_stack, unique):
    a = ActionRateLimit(test_stack["RELAUNCH_REDIS_URL"], f"c{unique}", per_minute=60, burst=2)
    b = ActionRateLimit(test_stack["RELAUNCH_REDIS_URL"], f"c{unique}", per_minute=60, burst=2)
    try:
        await a.take()
        await b.take()
        with pytest.raises(TemporaryError) as info:
            await a.take()
        assert 0 < info.value.delay <= 1.0
        await asyncio.sleep(info.value.delay + 0.05)
        await b.take()
    finally:
        await a.close()
        await b.close()
