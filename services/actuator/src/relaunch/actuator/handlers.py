"""Bus wiring of the actuator: the scheduler observer and the Advice reconciler.

Handlers only load -> plan -> do at most one step -> publish; the decisions are in domain/.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable

import nats.js.errors
from prometheus_client import Counter

from relaunch.common import subjects
from relaunch.common.bus import Bus, Delivery, utcnow
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.schemas import Advice, AuditEntry, JobObserved, ReconcileStatus

from .adapters.coordination import HoldRegistry
from .adapters.ratelimit import ActionRateLimit
from .adapters.slurm import Slurm
from .domain.observing import Observed, opted_in_jobs
from .domain.reconciling import OBSERVE_MODE, SCHEDULER_REJECTED, Plan, plan, would_run

log = logging.getLogger(__name__)

RECONCILE_OUTCOMES = Counter("relaunch_reconcile_outcomes_total", "Terminal reconcile outcomes",
                             ["status", "reason"])
STEPS = Counter("relaunch_reconcile_steps_total", "Reconcile steps taken", ["step", "mode"])
OBSERVED = Counter("relaunch_jobs_observed_total", "JobObserved messages published")


class Observer:
    """Polls Slurm and publishes JobObserved for opted-in jobs whenever what we see changes."""

    def __init__(self, bus: Bus, slurm: Slurm, cluster: str, interval_s: float,
                 active: Callable[[], bool] = lambda: True) -> None:
        self.bus, self.slurm, self.cluster, self.interval_s = bus, slurm, cluster, interval_s
        self.active = active
        self._last: dict[str, tuple] = {}
        self._paths: dict[tuple[str, int], tuple[str, str]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if self.active():
                    await self.poll_once()
                else:
                    self._last.clear()  # a standby re-publishes what it sees once it leads
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

    def __init__(self, bus: Bus, slurm: Slurm, mode: str, holds: HoldRegistry, limit: ActionRateLimit | None,
                 partitions: frozenset[str] = frozenset()) -> None:
        self.bus, self.slurm, self.mode, self.holds = bus, slurm, mode, holds
        self.limit, self.partitions = limit, partitions

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
        p = plan(advice, observed, utcnow(), newest, self.partitions)
        if p.kind in ("converged", "abandoned"):
            await self._finish(advice, "CONVERGED" if p.kind == "converged" else "ABANDONED", p.reason, p.detail)
            return
        if self.mode == "observe":
            await self._observe_only(advice, observed)
            return
        await self.holds.touch(advice.cluster, advice.job_id)  # the watchdog sees we are alive
        if p.kind == "wait":
            raise TemporaryError(p.detail, delay=p.delay)
        await self._take_step(advice, p, observed)
        raise TemporaryError("step taken; verifying", delay=0.2)

    async def _observe_only(self, advice: Advice, observed: Observed) -> None:
        """Record every command act mode would run from here, run none, and finish the Advice."""
        steps = would_run(advice, observed)
        nodes = sorted(set(observed.excluded) | set(advice.exclude_nodes))
        for n, step in enumerate(steps, start=1):
            argv = " ".join(self.slurm.argv(step, advice.job_id, nodes))
            await self._audit(advice, f"would {step}", f"observe mode, step {n} of {len(steps)}: {argv}",
                              f"actuator.{advice.cluster}.{advice.job_id}.{advice.generation}.observe.{n}")
            STEPS.labels(step, "observe").inc()
        await self._finish(advice, "ABANDONED", OBSERVE_MODE,
                           f"would have run: {', '.join(steps) or 'nothing'} (RELAUNCH_ACTUATOR_MODE=observe)")

    async def _take_step(self, advice: Advice, p: Plan, observed: Observed) -> None:
        assert p.step is not None
        job = advice.job_id
        key = f"actuator.{advice.cluster}.{job}.{advice.generation}.{p.step}.{observed.restarts}"
        nodes = sorted(set(observed.excluded) | set(advice.exclude_nodes))
        if p.step in DISRUPTIVE:
            if self.limit is not None:
                await self.limit.take()  # TemporaryError(wait) when the cluster-wide budget is spent
            if p.step == "requeuehold":
                # Recorded before the command: if we die right after it, the watchdog can release.
                await self.holds.record(advice.cluster, job, advice.generation, advice.attempt)
        try:
            await self.slurm.run_step(p.step, job, nodes)
        except PermanentError as exc:
            await self._audit(advice, f"{p.step} rejected", str(exc), key + ".rejected")
            await self._finish(advice, "ABANDONED", SCHEDULER_REJECTED, str(exc))
            raise _Done() from exc
        STEPS.labels(p.step, "act").inc()
        await self._audit(advice, p.step, " ".join(self.slurm.argv(p.step, job, nodes)), key)
        status = ReconcileStatus(cluster=advice.cluster, job_id=job, generation=advice.generation,
                                 status="PENDING", reason=p.reason, step=p.step, detail=p.detail, at=utcnow())
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
        await self.holds.forget(advice.cluster, advice.job_id)
        log.info("advice %s/%s gen %d: %s (%s) %s", advice.cluster, advice.job_id, advice.generation,
                 status, reason, detail)


DISRUPTIVE = frozenset({"requeuehold", "cancel"})
"""Steps that stop a running job: these draw from the cluster-wide rate limit."""


class _Done(Exception):
    """Internal: the Advice reached a terminal outcome inside a step; ack it."""


async def handle_advice(reconciler: Reconciler, advice: Advice, delivery: Delivery) -> None:
    try:
        await reconciler.handle(advice, delivery)
    except _Done:
        return
