"""Checkpoint facts leave the detector here (docs/goodput.md): each under an id made of what it says
(domain/checkpoints.msg_id), so every rank's copy of a save line and every redelivery is one message."""

from __future__ import annotations

from collections.abc import Iterable

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.schemas import CheckpointFact

from .domain.checkpoints import msg_id


class FactPublisher:
    def __init__(self, bus: Bus | None) -> None:
        self.bus = bus
        """None: facts are not published (a tracker of offline replays and tests, without a bus)."""

    async def publish(self, facts: Iterable[CheckpointFact]) -> None:
        if self.bus is None:
            return
        sent: set[str] = set()
        for fact in facts:
            key = msg_id(fact)
            if key not in sent:  # (several ranks' save lines in one batch)
                sent.add(key)
                await self.bus.publish(subjects.event_checkpoint(fact.cluster, fact.job_id), fact, msg_id=key)
