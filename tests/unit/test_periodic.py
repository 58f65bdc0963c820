"""The one periodic loop (relaunch.common.periodic): prompt stop, errors handled as its owner says."""

import asyncio
import logging
import time

import pytest

from relaunch.common.errors import TemporaryError
from relaunch.common.periodic import every, warn_on

log = logging.getLogger(__name__)


def test_stop_ends_the_wait_at_once_not_after_the_interval():
    async def scenario():
        stop, passes = asyncio.Event(), []

        async def step():
            passes.append(1)
            stop.set()

        started = time.monotonic()
        await every(60, step, stop)
        return len(passes), time.monotonic() - started

    passes, took = asyncio.run(scenario())
    assert passes == 1 and took < 1


def test_an_expected_error_is_logged_and_the_loop_goes_on(caplog):
    async def scenario():
        stop, passes = asyncio.Event(), []

        async def step():
            passes.append(1)
            if len(passes) < 3:
                raise TemporaryError("redis away")
            stop.set()

        await every(0, step, stop, on_error=warn_on(log, "loop: %s"))
        return len(passes)

    assert asyncio.run(scenario()) == 3
    assert "loop: redis away" in caplog.text


def test_an_unexpected_error_ends_the_loop_unless_a_handler_takes_it():
    async def boom():
        raise ValueError("bug")

    with pytest.raises(ValueError):
        asyncio.run(every(0, boom, asyncio.Event(), on_error=warn_on(log, "loop: %s")))

    async def survives():
        stop, seen = asyncio.Event(), []

        def crashed(exc):
            seen.append(exc)
            if len(seen) == 2:
                stop.set()

        await every(0, boom, stop, on_error=warn_on(log, "loop: %s", otherwise=crashed))
        return len(seen)

    assert asyncio.run(survives()) == 2


def test_a_wake_runs_the_next_pass_before_the_interval():
    async def scenario():
        stop, wake, passes = asyncio.Event(), asyncio.Event(), []

        async def step():
            passes.append(1)
            if len(passes) == 2:
                stop.set()

        task = asyncio.create_task(every(60, step, stop, wake=wake))
        await asyncio.sleep(0.05)
        wake.set()
        await asyncio.wait_for(task, 2)
        return len(passes)

    assert asyncio.run(scenario()) == 2
