"""The detector's one priority rule inside its event loop: crash detection before progress bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class CrashFirst:
    """Crash detection goes before progress bookkeeping in the one event loop they share: while a log
    batch or a job observation is being handled, progress batches wait. Under a progress backlog (tens
    of thousands of jobs, or a detector catching up) every progress batch is a long stretch of CPU, and
    the crash path, which awaits Redis and NATS several times per message, would get a turn only once
    per batch: 1,000 simultaneous failures then took a minute to become anomalies instead of seconds.
    Progress also waits `quiet_s` after the last urgent message, for the next fetch of a burst to arrive."""

    def __init__(self, quiet_s: float = 0.2) -> None:
        self.quiet_s = quiet_s
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._last = float("-inf")

    @contextlib.asynccontextmanager
    async def urgent(self) -> AsyncIterator[None]:
        self._busy += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._busy -= 1
            self._last = asyncio.get_running_loop().time()
            if not self._busy:
                self._idle.set()

    async def wait(self) -> None:
        """Return once no urgent handling is under way or ended within quiet_s (checked after each wake-up)."""
        while True:
            while self._busy:
                await self._idle.wait()
            quiet_for = self._last + self.quiet_s - asyncio.get_running_loop().time()
            if quiet_for <= 0:
                return
            await asyncio.sleep(quiet_for)
