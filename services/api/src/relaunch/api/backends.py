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
    progress: Any = None
    """relaunch.api.adapters.progress_read.ProgressReader (the detector's progress histories in
    Redis), a fake, or None: charts are then drawn from the ledger alone."""


@asynccontextmanager
async def connect(database_url: str, nats_url: str, redis_url: str = "",
                  cluster: str = "local") -> AsyncIterator[Backends]:
    from .adapters.events import BusEvents
    from .adapters.ledger_read import LedgerReader
    from .adapters.overrides import OverrideStore
    from .adapters.postgres import create_pool
    from .adapters.progress_read import ProgressReader

    pool = await create_pool(database_url)
    events = BusEvents(nats_url, cluster)
    await events.start()
    progress = ProgressReader(redis_url) if redis_url else None
    try:
        yield Backends(LedgerReader(pool), OverrideStore(pool), events, progress)
    finally:
        if progress is not None:
            await progress.close()
        await events.close()
        await pool.close()
