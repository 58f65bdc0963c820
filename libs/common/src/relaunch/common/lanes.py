"""Per-key ordering: the one primitive every part of relaunch uses where one key's work must happen in
order while different keys' work runs at once (a job's messages, a job's progress batches, a job's
outbox rows).

Invariant: a turn is queued when it is made (`lanes.turn(...)` is synchronous), not when it is
awaited, so turns made in stream order run in stream order whatever the event loop does between.
A turn over several keys waits for the earlier turns of each of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class Turn:
    """One holder's place in the lanes of its keys; `async with` waits for it and gives it up."""

    __slots__ = ("_lanes", "_keys", "_earlier", "_done")

    def __init__(self, lanes: KeyedLanes, keys: Iterable[Hashable]) -> None:
        self._lanes = lanes
        self._keys = tuple(keys)
        tails = lanes._tails
        self._earlier = {tails[k] for k in self._keys if k in tails}
        self._done = asyncio.get_running_loop().create_future()
        for key in self._keys:
            tails[key] = self._done

    async def wait(self) -> None:
        """Return once every earlier turn on any of this turn's keys has ended."""
        if self._earlier:
            await asyncio.wait(self._earlier)

    def leave(self) -> None:
        """End the turn (idempotent): the next one on its keys may go."""
        if self._done.done():
            return
        tails = self._lanes._tails
        for key in self._keys:
            if tails.get(key) is self._done:
                del tails[key]
        self._done.set_result(None)

    async def __aenter__(self) -> Turn:
        try:
            await self.wait()
        except BaseException:
            self.leave()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        self.leave()


class KeyedLanes:
    """FIFO lanes by key. Memory: one entry per key with a turn open (none once all ended)."""

    def __init__(self) -> None:
        self._tails: dict[Hashable, asyncio.Future] = {}

    def turn(self, *keys: Hashable) -> Turn:
        return Turn(self, keys)

    def __len__(self) -> int:
        return len(self._tails)
