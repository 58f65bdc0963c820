"""The API's Postgres connection: the pool, waited for at start, and the errors that mean the ledger
cannot answer (errors.py turns them into 503 answers). The only module of the API that names asyncpg's
connection and error types; adapters/ledger_read.py and adapters/overrides.py run the queries.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from relaunch.common.postgres_outage import DOWN as POSTGRES_DOWN

log = logging.getLogger(__name__)

POSTGRES_WAIT_S = 60
"""How long the API waits for Postgres at start before giving up (it is useless without the ledger)."""

SCHEMA_TOO_OLD: type[Exception] = asyncpg.exceptions.UndefinedTableError
"""A table this API reads is missing: the decider, which applies the migrations, has not run yet."""
UNAVAILABLE: tuple[type[Exception], ...] = POSTGRES_DOWN
BAD_VALUE: type[Exception] = asyncpg.exceptions.DataError
"""A value the request carried that Postgres cannot hold or compare (a NUL character in a text, a number
out of range): the request's fault, answered 422 (errors.py)."""
"""Postgres is down, unreachable or refusing: the ledger is unavailable for now (the one list shared
with the decider, relaunch.common.postgres_outage)."""


async def create_pool(database_url: str, wait_s: int = POSTGRES_WAIT_S) -> asyncpg.Pool:
    """A pool on the ledger, trying once a second for `wait_s` seconds (RuntimeError after that)."""
    for _ in range(wait_s):
        try:
            return await asyncpg.create_pool(database_url, min_size=1, max_size=5, command_timeout=10)
        except POSTGRES_DOWN as exc:
            log.warning("waiting for Postgres: %s", exc)
            await asyncio.sleep(1)
    raise RuntimeError(f"Postgres at {database_url} is not reachable (RELAUNCH_DATABASE_URL)")
