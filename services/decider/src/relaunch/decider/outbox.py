"""Publishes the transactional outbox: rows committed with an Advice, sent with their Msg-Id.

A crash between commit and publish leaves the row unpublished; it is sent on the next pass (at
start, on a kick after each commit, and every `interval_s`). A crash between publish and
mark_published re-sends it; JetStream drops the duplicate by Msg-Id.
"""

from __future__ import annotations

import asyncio
import logging

from relaunch.common.errors import TemporaryError
from relaunch.common.connection import Bus
from relaunch.common.lanes import KeyedLanes
from relaunch.common.periodic import every, warn_on

from .adapters.ledger import Ledger

log = logging.getLogger(__name__)

BATCH = 500
"""Outbox rows read (and published concurrently across jobs) per pass."""


class OutboxPublisher:
    def __init__(self, bus: Bus, ledger: Ledger, interval_s: float = 1.0) -> None:
        self.bus, self.ledger, self.interval_s = bus, ledger, interval_s
        self._kick = asyncio.Event()

    def kick(self) -> None:
        self._kick.set()

    async def publish_pending(self) -> int:
        """Publish what is unpublished, a batch at a time. Rows of one subject (one job) go out one after
        another in commit order; different jobs' rows concurrently, so that the Advice of 1,000 decisions
        taken together do not wait for each other's PubAck. A batch is marked published once sent."""
        rows = await self.ledger.unpublished(BATCH)
        lanes = KeyedLanes()
        sent: list[int] = []

        async def publish(row, turn) -> None:
            async with turn:
                # The row's traceparent continues the trace of the decision that wrote it.
                await self.bus.publish_bytes(row["subject"], bytes(row["payload"]), row["msg_id"],
                                             row["traceparent"] or None)
                sent.append(row["id"])

        try:
            async with asyncio.TaskGroup() as group:
                for row in rows:  # turns taken in commit order
                    group.create_task(publish(row, lanes.turn(row["subject"])))
        except* TemporaryError as failed:  # said once, with what NATS said (the rows are sent again)
            first = failed.exceptions[0]
            raise TemporaryError(f"{len(failed.exceptions)} of {len(rows)} not published: {first}") from first
        finally:  # what was sent is marked even when another lane failed (the rest is sent again)
            if sent:
                await self.ledger.mark_published_many(sent)
        if len(rows) == BATCH:
            self.kick()  # more are waiting
        return len(sent)

    async def run(self, stop: asyncio.Event) -> None:
        # Keep going whatever fails: the rows stay unpublished and the next pass sends them.
        await every(self.interval_s, self.publish_pending, stop, wake=self._kick,
                    on_error=warn_on(log, "outbox: publish pass failed, will retry: %s", (Exception,)))
