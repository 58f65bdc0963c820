"""What the routes read and write, built once at start (or replaced by fakes in tests)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

POSTGRES_WAIT_S = 60
"""How long the API waits for Postgres at start before giving up (it is useless without the ledger)."""


@dataclass
class Backends:
    ledger: Any
    """relaunch.api.adapters.ledger_read.LedgerReader, or a fake with the same methods."""
    overrides: Any
    """relaunch.api.adapters.overrides.OverrideStore, or a fake."""
    events: Any
    """relaunch.api.adapters.events.BusEvents, or a fake."""


@asynccontextmanager
async def connect(database_url: str, nats_url: str) -> AsyncIterator[Backends]:
    import asyncpg

    from .adapters.events import BusEvents
    from .adapters.ledger_read import LedgerReader
    from .adapters.overrides import OverrideStore

    pool = None
    for _ in range(POSTGRES_WAIT_S):
        try:
            pool = await asyncpg.create_pool(database_url, min_size=1, max_size=5, command_timeout=10)
            break
        except (OSError, asyncpg.exceptions.PostgresError) as exc:
            log.warning("waiting for Postgres: %s", exc)
            await asyncio.sleep(1)
    if pool is None:
        raise RuntimeError(f"Postgres at {database_url} is not reachable (RELAUNCH_DATABASE_URL)")
    events = BusEvents(nats_url)
    await events.start()
    try:
        yield Backends(LedgerReader(pool), OverrideStore(pool), events)
    finally:
        await events.close()
        await pool.close()
