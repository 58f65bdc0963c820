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


class OutboxPublisher:
    def __init__(self, bus: Bus, ledger: Ledger, interval_s: float = 1.0) -> None:
        self.bus, self.ledger, self.interval_s = bus, ledger, interval_s
        self._kick = asyncio.Event()

    def kick(self) -> None:
        self._kick.set()

    async def publish_pending(self) -> int:
        sent = 0
        for row in await self.ledger.unpublished():
            headers = {subjects.MSG_ID_HEADER: row["msg_id"]}
            if row["traceparent"]:  # continue the trace of the decision that wrote the row
                headers[telemetry.TRACEPARENT] = row["traceparent"]
            await self.bus.js.publish(row["subject"], bytes(row["payload"]), headers=headers)
            await self.ledger.mark_published(row["id"])
            sent += 1
        return sent

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
