"""When Redis is unavailable: the one list of errors that mean so, and their mapping to TemporaryError.

Used by every Redis adapter (the detector's hot state, the actuator's rate limit), so an outage reads
the same everywhere: the message waits (nak with a delay) until Redis answers again. Needs the `redis`
package, which only the services that talk to Redis install (the `redis` extra of relaunch-common).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from redis import exceptions as redis_errors

from .errors import TemporaryError

DOWN: tuple[type[Exception], ...] = (redis_errors.RedisError, OSError)
"""Redis is down, unreachable, timing out or refusing (a socket error is an OSError)."""


@contextmanager
def redis_outage(what: str = "Redis", *, delay: float = 1.0, backoff: bool = True,
                 also: Callable[[Exception], object] | None = None) -> Iterator[None]:
    """Turn an error of `DOWN` inside the block into TemporaryError("<what> unavailable: ...", delay),
    after calling `also` with it (a health check that records the outage)."""
    try:
        yield
    except DOWN as exc:
        if also is not None:
            also(exc)
        raise TemporaryError(f"{what} unavailable: {exc}", delay=delay, backoff=backoff) from exc
