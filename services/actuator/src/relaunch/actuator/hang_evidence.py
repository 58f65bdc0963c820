"""Bus wiring of hang evidence: on a hang anomaly, read the job's ranks from inside its allocation
(adapters/hang_collection.py), attribute (domain/hang_readings.py) and publish HangEvidence
(docs/architecture.md, "Hang evidence"). Every hang anomaly gets one HangEvidence, "skipped" or
"unavailable" when nothing was read, so the decider, which waits for it, never waits longer than needed.

Safety: only in act mode, only on a job whose comment opts in (and is not observe-only for its errors),
only while it runs, and bounded by `timeout_s` in all; no evidence changes nothing (fail closed).
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter, Histogram

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.hangs.triggers import wants_evidence
from relaunch.common.optin import parse_comment
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.schemas import AnomalyDetected, HangEvidence

from .adapters.hang_collection import collect
from .domain.hang_readings import evidence, unavailable
from .domain.rest_values import observed_from_rest

log = logging.getLogger(__name__)

COLLECTIONS = Counter("relaunch_hang_evidence_total", "Hang evidence published, by status and blame",
                      ["status", "blame"])
COLLECTION_SECONDS = Histogram("relaunch_hang_evidence_seconds", "Time to read a hung job's ranks")


class HangReader:
    def __init__(self, bus: Bus, slurm, mode: str, *, enabled: bool, python: str, pyspy: str,
                 timeout_s: float) -> None:
        self.bus, self.slurm, self.mode = bus, slurm, mode
        self.enabled, self.python, self.pyspy, self.timeout_s = enabled, python, pyspy, timeout_s

    async def on_anomaly(self, anomaly: AnomalyDetected, delivery: Delivery) -> None:
        if not wants_evidence(anomaly):
            return
        started = time.monotonic()
        found = await self._read(anomaly, started)
        COLLECTIONS.labels(found.status, found.blame).inc()
        COLLECTION_SECONDS.observe(found.elapsed_s)
        log.info("job %s/%s attempt %d: hang evidence %s in %.1f s: %s", anomaly.cluster, anomaly.job_id,
                 anomaly.attempt, found.status, found.elapsed_s, found.reason or found.detail)
        await self.bus.publish(subjects.event_hang_evidence(anomaly.cluster, anomaly.job_id), found,
                               msg_id=f"hang_evidence.{anomaly.anomaly_id}")

    async def _read(self, anomaly: AnomalyDetected, started: float) -> HangEvidence:
        def skip(why: str) -> HangEvidence:
            return unavailable(anomaly, why, utcnow(), time.monotonic() - started, status="skipped")

        if not self.enabled:
            return skip("hang evidence collection is off (RELAUNCH_ACTUATOR_HANG_EVIDENCE)")
        if self.mode != "act":
            return skip("the actuator is in observe mode: it steps into no job")
        if getattr(self.slurm, "cli", self.slurm) is None:  # slurmrestd without Slurm's clients: no srun
            return skip("srun is not available to this actuator (slurmrestd without the CLI)")
        try:
            job = await self.slurm.show_job(anomaly.job_id)
        except Exception as exc:  # noqa: BLE001 - fail closed: no evidence, the hang handled as without
            return unavailable(anomaly, f"the job could not be read: {exc}", utcnow(), time.monotonic() - started)
        if job is None:
            return skip("the job is gone")
        optin = parse_comment(str(job.get("comment") or ""))
        if not optin.opted_in or optin.observe_only:
            return skip("the job's comment does not opt in to actions (observe-only)")
        try:
            observed = observed_from_rest(job)
        except Exception as exc:  # noqa: BLE001 - a shape nobody knows: no evidence
            return unavailable(anomaly, f"the job could not be read: {exc}", utcnow(), time.monotonic() - started)
        if observed.state != "RUNNING" or not observed.nodes:
            return skip(f"the job is not running ({observed.state or 'no state'})")
        if observed.restarts != anomaly.attempt:
            return skip(f"attempt {anomaly.attempt} is over (the job is on attempt {observed.restarts})")
        budget = max(1.0, self.timeout_s - (time.monotonic() - started))
        outputs = await collect(anomaly.job_id, list(observed.nodes), self.python, self.pyspy, budget)
        return evidence(anomaly, outputs, time.monotonic() - started, utcnow())
