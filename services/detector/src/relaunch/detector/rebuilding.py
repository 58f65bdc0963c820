"""Rebuilding the detector's hot state when Redis lost it (flushed, or replaced by an empty server).

Why: the detector learns which jobs to follow from JobObserved, and the actuator's observer publishes
one only when what it sees changes. After Redis is flushed, a running job that does not change state
is followed by nobody: its new log lines are never read, so a hang (no new progress) is never
detected. The SIGNALS stream still holds the last JobObserved of every job (max_age 6 h), so the
detector replays those and follows again every job whose last observation is not final.

How Redis loss is noticed: a marker key written after each rebuild (`HotState.claim_rebuild`);
when it is missing, whichever replica claims it first rebuilds. A rebuild that fails gives the
claim back, so another pass (or replica) tries again.

Hazard: the durable consumer may process a newer observation of a job while the replay handles
an older one; `Detector.on_job` ignores observations of an older attempt than the one it follows,
and the replay reads the newest message per subject, so the window is one poll of the observer.
"""

from __future__ import annotations

import asyncio
import logging

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.errors import TemporaryError
from relaunch.common.job_states import FINAL_STATES
from relaunch.common.periodic import every, warn_on
from relaunch.common.schemas import JobObserved

from .adapters.hotstate import HotState

log = logging.getLogger(__name__)

CHECK_S = 2.0
"""How often the marker is checked (a Redis EXISTS)."""


def _rebuild_crashed(exc: Exception) -> None:
    """Never take the detector down for a failed rebuild: the next pass tries again."""
    log.error("hot state rebuild failed (will retry)", exc_info=exc)


class HotStateRebuilder:
    def __init__(self, bus: Bus, state: HotState, cluster: str, on_job, check_s: float = CHECK_S) -> None:
        """`on_job`: the detector's JobObserved handler, replayed for each job still in progress."""
        self.bus, self.state, self.cluster, self.on_job, self.check_s = bus, state, cluster, on_job, check_s

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.check_s, self.check_once, stop, on_error=warn_on(
            log, "hot state rebuild: %s (will retry)", (TemporaryError, TimeoutError), otherwise=_rebuild_crashed))

    async def check_once(self) -> None:
        """Rebuild the hot state if this replica claims the rebuild (Redis lost it)."""
        if await self.state.claim_rebuild(self.cluster):
            try:
                count = await self.rebuild()
            except BaseException:
                await self.state.release_rebuild(self.cluster)
                raise
            log.info("hot state: followed %d jobs again from the last observations in %s",
                     count, subjects.SIGNALS.name)

    async def rebuild(self) -> int:
        """Replay the newest JobObserved of every job of this cluster whose attempt is not over."""
        prefix = subjects.signal_job(self.cluster, "")
        count = 0
        for subject in await self.bus.stream_subjects(subjects.SIGNALS, prefix + ">"):
            last = await self.bus.last_message(subjects.SIGNALS, subject)
            if last is None:
                continue  # aged out since the listing
            data, seq = last
            try:
                obs = JobObserved.model_validate_json(data)
            except ValueError:
                continue  # the durable consumer dead-letters it; nothing to follow
            if obs.state in FINAL_STATES:
                continue
            await self.on_job(obs, Delivery(subject=subject, num_delivered=1, stream_seq=seq))
            count += 1
        return count
