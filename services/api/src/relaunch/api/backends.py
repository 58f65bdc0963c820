"""What the routes read and write, built once at start (or replaced by fakes in tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any


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
    from .adapters.events import BusEvents
    from .adapters.ledger_read import LedgerReader
    from .adapters.overrides import OverrideStore
    from .adapters.postgres import create_pool

    pool = await create_pool(database_url)
    events = BusEvents(nats_url)
    await events.start()
    try:
        yield Backends(LedgerReader(pool), OverrideStore(pool), events)
    finally:
        await events.close()
        await pool.close()
