"""The detector's gate that puts crash detection before progress bookkeeping (gate.CrashFirst)."""

import asyncio
import time

from relaunch.detector.gate import CrashFirst


async def test_progress_waits_for_urgent_work_and_a_quiet_moment_after_it():
    gate = CrashFirst(quiet_s=0.2)
    start = time.monotonic()
    await gate.wait()
    assert time.monotonic() - start < 0.05, "nothing urgent: progress goes on at once"

    async def urgent(seconds):
        async with gate.urgent():
            await asyncio.sleep(seconds)

    first = asyncio.create_task(urgent(0.2))
    second = asyncio.create_task(urgent(0.3))  # overlapping: the gate stays shut until both end
    await asyncio.sleep(0.01)
    start = time.monotonic()
    await gate.wait()
    waited = time.monotonic() - start
    assert 0.45 <= waited < 0.7, waited
    await asyncio.gather(first, second)


async def test_an_urgent_handler_that_fails_still_opens_the_gate():
    gate = CrashFirst(quiet_s=0.0)

    async def failing():
        async with gate.urgent():
            raise RuntimeError("boom")

    try:
        await failing()
    except RuntimeError:
        pass
    async with asyncio.timeout(1):
        await gate.wait()
