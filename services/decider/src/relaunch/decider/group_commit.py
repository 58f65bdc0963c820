"""Group commit: the handlers of messages that arrive together are served by one call of a batch
function (docs/architecture.md, "Scale": the decider's set-based decisions).

Each caller of `submit` waits for its own item's outcome: the value or exception the batch function
set on that item's future. A batch starts at once when fewer than `max_inflight` are running (a lone
message waits for nothing), after a few turns of the event loop that let the other tasks of the same
fetch queue theirs; items that come while batches run wait for the next one, up to `max_batch` each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

GATHER_TURNS = 3
"""Event-loop turns a new batch waits before it takes the queue: the message tasks FastStream starts
for one fetch reach the handler a turn or two after each other (the middleware's lane, the decoder)."""


class GroupCommit(Generic[T, R]):
    def __init__(self, run: Callable[[list[tuple[T, asyncio.Future[R]]]], Awaitable[None]], *,
                 max_batch: int = 64, max_inflight: int = 2) -> None:
        """`run(batch)` must settle every future of its batch (a result or an exception); any it leaves
        unsettled, or all of them when it raises, get its exception (or a RuntimeError)."""
        self._run, self.max_batch, self.max_inflight = run, max_batch, max_inflight
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._inflight = 0
        self._tasks: set[asyncio.Task] = set()

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._inflight < self.max_inflight:
            self._inflight += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # shield: a caller cancelled (a service stopping) leaves the batch to finish for the others
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        try:
            for _ in range(GATHER_TURNS):
                await asyncio.sleep(0)
            while self._queue:
                batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
                failure: BaseException | None = None
                try:
                    await self._run(batch)
                except Exception as exc:  # noqa: BLE001 - handed to the callers, whose outcome it is
                    failure = exc
                except BaseException:  # cancelled (the loop closing): the callers are told so
                    for _, future in batch:
                        future.cancel()
                    raise
                for _, future in batch:
                    if not future.done():
                        future.set_exception(failure or RuntimeError("the batch left this item unsettled"))
        finally:
            self._inflight -= 1
