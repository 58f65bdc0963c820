"""Publishes the transactional outbox: rows committed with an Advice, sent with their Msg-Id.

A crash between commit and publish leaves the row unpublished; it is sent on the next pass (at
start, on a kick after each commit, and every `interval_s`). A crash between publish and
mark_published re-sends it; JetStream drops the duplicate by Msg-Id.
"""

from __future__ import annotations

import asyncio
import logging

from relaunch.common import subjects, telemetry
from relaunch.common.bus import Bus
from relaunch.common.errors import TemporaryError

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
        lanes: dict[str, list] = {}
        for row in rows:
            lanes.setdefault(row["subject"], []).append(row)
        sent: list[int] = []

        async def lane(rows: list) -> None:
            for row in rows:
                headers = {subjects.MSG_ID_HEADER: row["msg_id"]}
                if row["traceparent"]:  # continue the trace of the decision that wrote the row
                    headers[telemetry.TRACEPARENT] = row["traceparent"]
                await self.bus.js.publish(row["subject"], bytes(row["payload"]), headers=headers)
                sent.append(row["id"])

        try:
            async with asyncio.TaskGroup() as group:
                for rows_of_subject in lanes.values():
                    group.create_task(lane(rows_of_subject))
        finally:  # what was sent is marked even when another lane failed (the rest is sent again)
            if sent:
                await self.ledger.mark_published_many(sent)
        if len(rows) == BATCH:
            self.kick()  # more are waiting
        return len(sent)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._kick.clear()
            try:
                await self.publish_pending()
            except (TemporaryError, OSError, Exception) as exc:  # keep going: rows stay unpublished
                log.warning("outbox: publish pass failed, will retry: %s", exc)
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=self.interval_s)
            except TimeoutError:
                pass
