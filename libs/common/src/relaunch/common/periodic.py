"""The one stop-aware periodic loop: "run this every N seconds until stop is set".

Every background loop of every service (followers, sweeps, pollers, the lease, the outbox, Redis and
Postgres reachability) runs through `every`, so stopping is prompt everywhere: the wait between two
passes ends the moment `stop` is set, never after a full interval.

Errors: an exception from a pass goes to the loop's `on_error`, passed in by the loop's owner, which
logs it (the loop goes on), returns a delay (the loop goes on after that delay instead of the interval)
or raises (the loop ends). With no `on_error`, an exception ends the loop: a loop that must survive
anything says so by passing a handler that catches everything. `asyncio.CancelledError` and other
`BaseException`s are never handed to `on_error`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .errors import TemporaryError

# What a loop does with an exception from one pass: None to go on after the interval, a number of
# seconds to go on after that delay, or raise to end the loop.
ErrorHandler = Callable[[Exception], "float | None"]


def warn_on(logger: logging.Logger, message: str, kinds: tuple[type[Exception], ...] = (TemporaryError,),
            otherwise: ErrorHandler | None = None) -> ErrorHandler:
    """The usual handler: an exception of `kinds` (expected: a store or Slurm away for a while) is
    logged as a warning, `message % exc`, and the loop goes on; any other goes to `otherwise`, or ends
    the loop when there is none."""
    def handle(exc: Exception) -> float | None:
        if isinstance(exc, kinds):
            logger.warning(message, exc)
            return None
        if otherwise is None:
            raise exc
        return otherwise(exc)
    return handle


async def pause(stop: asyncio.Event, seconds: float, wake: asyncio.Event | None = None) -> bool:
    """Wait `seconds`, or less once `stop` (or `wake`, if given) is set; True when `stop` is set."""
    if stop.is_set():
        return True
    waiters = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waiters.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait(waiters, timeout=max(seconds, 0), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return stop.is_set()


async def every(seconds: float, step: Callable[[], Awaitable[object]], stop: asyncio.Event, *,
                on_error: ErrorHandler | None = None, wake: asyncio.Event | None = None) -> None:
    """Await `step()`, then wait `seconds` (cut short by `stop`, or by `wake`, which is cleared before
    each pass so that a wake during a pass runs one more at once), until `stop` is set."""
    while not stop.is_set():
        if wake is not None:
            wake.clear()
        delay = seconds
        try:
            await step()
        except Exception as exc:
            if on_error is None:
                raise
            backoff = on_error(exc)
            if backoff is not None:
                delay = backoff
        await pause(stop, delay, wake)
