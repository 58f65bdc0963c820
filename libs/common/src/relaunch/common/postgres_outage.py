"""When Postgres is unavailable: the one list of errors that mean so, and their mapping to TemporaryError.

Used by every Postgres adapter (the decider's ledger, and the API, which answers 503 for these), so
an outage reads the same everywhere. What is here is an outage or a transient conflict, worth trying
again; any other Postgres error (a constraint, a missing table) is not, and is left to the caller.
Needs `asyncpg`, which only the services that talk to Postgres install (the `postgres` extra of
relaunch-common).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg

from .errors import TemporaryError

_pg = asyncpg.exceptions
DOWN: tuple[type[Exception], ...] = (
    OSError, TimeoutError, _pg.InterfaceError, _pg.PostgresConnectionError, _pg.CannotConnectNowError,
    _pg.TooManyConnectionsError, _pg.AdminShutdownError, _pg.CrashShutdownError,
    _pg.SerializationError, _pg.DeadlockDetectedError,
)
"""Postgres is down, unreachable, restarting, full, or rolled this transaction back (serialization,
deadlock): trying again later can succeed."""


@contextmanager
def postgres_outage(what: str = "Postgres", *, delay: float = 1.0, backoff: bool = True) -> Iterator[None]:
    """Turn an error of `DOWN` inside the block into TemporaryError("<what> unavailable: ...", delay)."""
    try:
        yield
    except DOWN as exc:
        raise TemporaryError(f"{what} unavailable: {exc}", delay=delay, backoff=backoff) from exc
