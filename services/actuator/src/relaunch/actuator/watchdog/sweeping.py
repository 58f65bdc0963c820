"""The watchdog's sweep: release a job relaunch put on hold when no live actuator has advanced its
Advice for `bound_s`, so an outage of relaunch never strands a job.

It only ever touches jobs in the hold registry (written by the actuator before each requeuehold),
and only while Slurm still shows them held after a requeue (restart counter past the attempt the
Advice was about). In observe mode it records what it would release and releases nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.clock import utcnow
from relaunch.common.periodic import every, warn_on
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.schemas import AuditEntry

from ..adapters.coordination import Hold, HoldRegistry
from ..slurm_port import SlurmPort

log = logging.getLogger(__name__)


class Watchdog:
    def __init__(self, bus: Bus, slurm: SlurmPort, holds: HoldRegistry, mode: str, bound_s: float) -> None:
        self.bus, self.slurm, self.holds, self.mode, self.bound_s = bus, slurm, holds, mode, bound_s

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        await every(interval_s, lambda: self.sweep(time.time()), stop,
                    on_error=warn_on(log, "watchdog: %s", (TemporaryError, PermanentError)))

    async def sweep(self, now: float) -> list[str]:
        """Release (or, in observe mode, report) every stale hold; returns the job ids acted on."""
        acted = []
        for hold in await self.holds.all():
            if now - hold.touched_at < self.bound_s:
                continue
            observed = await self.slurm.observe(hold.job_id)
            if not (observed.exists and observed.held and observed.restarts > hold.attempt):
                await self.holds.forget(hold.cluster, hold.job_id)  # no longer ours to release
                continue
            stale = f"no actuator advanced advice generation {hold.generation} for {now - hold.touched_at:.0f} s"
            if self.mode == "observe":
                await self._audit(hold, "would release", f"observe mode: {stale}")
            else:
                await self.slurm.run_step("release", hold.job_id)
                await self.slurm.run_step("start_now", hold.job_id)  # it is PENDING: effective at once
                await self._audit(hold, "released", f"{stale}; released the held job so it can run")
                await self.holds.forget(hold.cluster, hold.job_id)
                log.warning("watchdog released job %s/%s: %s", hold.cluster, hold.job_id, stale)
            acted.append(hold.job_id)
        return acted

    async def _audit(self, hold: Hold, action: str, detail: str) -> None:
        key = f"watchdog.{hold.cluster}.{hold.job_id}.{hold.generation}.{action.replace(' ', '_')}"
        entry = AuditEntry(cluster=hold.cluster, job_id=hold.job_id, service="watchdog", action=action,
                           detail=detail, idempotency_key=key, at=utcnow())
        await self.bus.publish(subjects.event_audit(hold.cluster, hold.job_id), entry, msg_id=key)
