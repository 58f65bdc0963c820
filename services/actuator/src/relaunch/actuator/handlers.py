"""Bus wiring of the actuator: the scheduler observer and the Advice reconciler.

Handlers only load -> plan -> do at most one step -> publish; the decisions are in domain/.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

import nats.js.errors
from prometheus_client import Counter

from relaunch.common import subjects
from relaunch.common.bus import Bus, Delivery, utcnow
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.schemas import Advice, AuditEntry, JobObserved, ReconcileStatus

from .adapters.slurm import Slurm
from .domain.observing import opted_in_jobs
from .domain.reconciling import SCHEDULER_REJECTED, Plan, plan

log = logging.getLogger(__name__)

RECONCILE_OUTCOMES = Counter("relaunch_reconcile_outcomes_total", "Terminal reconcile outcomes",
                             ["status", "reason"])
STEPS = Counter("relaunch_reconcile_steps_total", "Reconcile steps taken", ["step", "mode"])
OBSERVED = Counter("relaunch_jobs_observed_total", "JobObserved messages published")


class Observer:
    """Polls Slurm and publishes JobObserved for opted-in jobs whenever what we see changes."""

    def __init__(self, bus: Bus, slurm: Slurm, cluster: str, interval_s: float) -> None:
        self.bus, self.slurm, self.cluster, self.interval_s = bus, slurm, cluster, interval_s
        self._last: dict[str, tuple] = {}
        self._paths: dict[tuple[str, int], tuple[str, str]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.poll_once()
            except (TemporaryError, PermanentError) as exc:
                log.warning("observer: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.interval_s)
            except TimeoutError:
                pass

    async def poll_once(self) -> None:
        listing = await self.slurm.list_jobs()
        for job in opted_in_jobs(listing):
            key = job.change_key()
            if self._last.get(job.job_id) == key:
                continue
            stdout, stderr = await self._paths_of(job.job_id, job.restarts)
            observed = JobObserved(
                cluster=self.cluster, job_id=job.job_id, name=job.name, state=job.state, reason=job.reason,
                restarts=job.restarts, nodes=list(job.nodes), comment=job.comment, partition=job.partition,
                stdout=stdout, stderr=stderr, exit_code=job.exit_code, observed_at=utcnow(),
            )
            digest = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
            await self.bus.publish(subjects.signal_job(self.cluster, job.job_id), observed,
                                   msg_id=f"job.{self.cluster}.{job.job_id}.{digest}")
            OBSERVED.inc()
            self._last[job.job_id] = key

    async def _paths_of(self, job_id: str, restarts: int) -> tuple[str, str]:
        cached = self._paths.get((job_id, restarts))
        if cached is None:
            fields = await self.slurm.show_job(job_id) or {}
            cached = (fields.get("StdOut", ""), fields.get("StdErr", ""))
            if len(self._paths) > 10_000:
                self._paths.clear()
            self._paths[(job_id, restarts)] = cached
        return cached


class Reconciler:
    """Consumes ADVICE; acks only at a terminal outcome, naks to look again meanwhile."""

    def __init__(self, bus: Bus, slurm: Slurm, mode: str) -> None:
        self.bus, self.slurm, self.mode = bus, slurm, mode

    async def newest_generation(self, advice: Advice) -> int:
        try:
            last = await self.bus.js.get_last_msg(subjects.ADVICE.name, subjects.advice(advice.cluster, advice.job_id))
        except nats.js.errors.NotFoundError:
            return advice.generation
        try:
            return max(advice.generation, Advice.model_validate_json(last.data).generation)
        except ValueError:
            return advice.generation

    async def handle(self, advice: Advice, delivery: Delivery) -> None:
        observed = await self.slurm.observe(advice.job_id)
        newest = await self.newest_generation(advice)
        p = plan(advice, observed, utcnow(), newest)
        if p.kind == "wait":
            raise TemporaryError(p.detail, delay=p.delay)
        if p.kind in ("converged", "abandoned"):
            await self._finish(advice, "CONVERGED" if p.kind == "converged" else "ABANDONED", p.reason, p.detail)
            return
        await self._take_step(advice, p, observed.excluded, observed.restarts)
        raise TemporaryError("step taken; verifying", delay=0.2)

    async def _take_step(self, advice: Advice, p: Plan, excluded: tuple[str, ...], restarts: int) -> None:
        assert p.step is not None
        job = advice.job_id
        argv_note = p.detail
        key = f"actuator.{advice.cluster}.{job}.{advice.generation}.{p.step}.{restarts}"
        if self.mode == "observe":
            await self._audit(advice, f"would {p.step}", f"observe mode: {argv_note}", key)
            STEPS.labels(p.step, "observe").inc()
            await self._finish(advice, "ABANDONED", "observe mode", f"would have run: {p.step}")
            raise _Done()
        try:
            if p.step == "requeuehold":
                await self.slurm.requeuehold(job)
            elif p.step == "exclude":
                await self.slurm.exclude(job, sorted(set(excluded) | set(advice.exclude_nodes)))
            elif p.step == "release":
                await self.slurm.release(job)
            elif p.step == "start_now":
                await self.slurm.start_now(job)
            elif p.step == "cancel":
                await self.slurm.cancel(job)
        except PermanentError as exc:
            await self._audit(advice, f"{p.step} rejected", str(exc), key + ".rejected")
            await self._finish(advice, "ABANDONED", SCHEDULER_REJECTED, str(exc))
            raise _Done() from exc
        STEPS.labels(p.step, "act").inc()
        await self._audit(advice, p.step, argv_note, key)
        status = ReconcileStatus(cluster=advice.cluster, job_id=job, generation=advice.generation,
                                 status="PENDING", reason=p.reason, step=p.step, detail=argv_note, at=utcnow())
        await self.bus.publish(subjects.event_reconcile(advice.cluster, job), status, msg_id=key + ".status")

    async def _audit(self, advice: Advice, action: str, detail: str, key: str) -> None:
        entry = AuditEntry(cluster=advice.cluster, job_id=advice.job_id, service="actuator", action=action,
                           detail=detail, idempotency_key=key, at=utcnow())
        await self.bus.publish(subjects.event_audit(advice.cluster, advice.job_id), entry, msg_id=key)

    async def _finish(self, advice: Advice, status: str, reason: str, detail: str) -> None:
        RECONCILE_OUTCOMES.labels(status, reason).inc()
        msg = ReconcileStatus(cluster=advice.cluster, job_id=advice.job_id, generation=advice.generation,
                              status=status, reason=reason, detail=detail, at=utcnow())
        await self.bus.publish(subjects.event_reconcile(advice.cluster, advice.job_id), msg,
                               msg_id=f"reconcile.{advice.cluster}.{advice.job_id}.{advice.generation}.final")
        log.info("advice %s/%s gen %d: %s (%s) %s", advice.cluster, advice.job_id, advice.generation,
                 status, reason, detail)


class _Done(Exception):
    """Internal: the Advice reached a terminal outcome inside a step; ack it."""


async def handle_advice(reconciler: Reconciler, advice: Advice, delivery: Delivery) -> None:
    try:
        await reconciler.handle(advice, delivery)
    except _Done:
        return
