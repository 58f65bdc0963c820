"""Bus wiring of the actuator: the Advice reconciler (the scheduler observer is in observer.py).

Handlers only load -> plan -> do at most one step -> publish; the decisions are in domain/, and the
plan carries the command a step runs and the audit text that records it. A pass returns its Outcome
(controller-runtime style): done, or look again after a delay; handle_advice turns the latter into a
TemporaryError, which the outcome middleware naks with that delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import datetime as dt
import logging
import time
from dataclasses import dataclass

from prometheus_client import Counter

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.job_states import FAILED_STATES
from relaunch.common.schemas import Advice, AuditEntry, ReconcileStatus

from .adapters.coordination import HoldRegistry
from .adapters.ratelimit import ActionRateLimit
from .slurm_port import SlurmPort
from .domain.draining import Drain, lost_nodes, plan_downs, plan_drains
from .domain.launches import BatchStep
from .domain.observing import Observed
from .domain.reconciling import OBSERVE_MODE, SCHEDULER_REJECTED, Plan, observe_only, plan
from .domain.refusals import Refusals, describe
from .domain.startability import possibly_refused
from .metrics import observe_recovery
from .observer import Observer  # noqa: F401  (re-exported: the composition root wires it from here)

log = logging.getLogger(__name__)

RECONCILE_OUTCOMES = Counter("relaunch_reconcile_outcomes_total", "Terminal reconcile outcomes",
                             ["status", "reason"])
STEPS = Counter("relaunch_reconcile_steps_total", "Reconcile steps taken", ["step", "mode"])
REFUSALS = Counter("relaunch_slurm_refusals_total",
                   "Reconcile steps Slurm refused or did not answer (retried later)", ["step"])


@dataclass(frozen=True)
class Outcome:
    """How one reconcile pass ends: done (a terminal status was published; ack), or look again after
    `again_s` (nak with that delay), saying why in `detail`."""
    done: bool
    detail: str = ""
    again_s: float = 0.0
    step: str | None = None
    """The step this pass took, if it took one."""
    inline: bool = True
    """Whether the delivery may go on with another pass (False: nak, and look again on a redelivery)."""


DONE = Outcome(done=True)


def again(detail: str, delay: float) -> Outcome:
    return Outcome(done=False, detail=detail, again_s=delay)


class Reconciler:
    """Consumes ADVICE; acks only at a terminal outcome, naks to look again meanwhile."""

    def __init__(self, bus: Bus, slurm: SlurmPort, mode: str, holds: HoldRegistry, limit: ActionRateLimit | None,
                 partitions: frozenset[str] = frozenset(), drain_nodes: bool = False,
                 down_lost_nodes: bool = True, fence: Callable[[], bool] = lambda: True) -> None:
        """`fence()`: whether this actuator may still act (it holds the lease, coordination.py); asked
        right before every Slurm command."""
        self.bus, self.slurm, self.mode, self.holds = bus, slurm, mode, holds
        self.fence = fence
        self.limit, self.partitions, self.drain_nodes = limit, partitions, drain_nodes
        self.down_lost_nodes = down_lost_nodes
        self._drain_rejected: set[tuple[str, str, int, str]] = set()
        self.refusals = Refusals()
        self.clock = time.monotonic
        self._ended: dict[tuple[str, str, int, int], dt.datetime] = {}
        """(cluster, job, generation, restart count after the requeue) -> EndTime of the attempt requeued
        after it had ended: lets StartTime=now come a second sooner (startability.py, rule 2). Only a hint:
        another replica, or this one after a restart, uses the SubmitTime bound, which is always safe."""

    async def newest_generation(self, advice: Advice) -> int:
        last = await self.bus.last_message(subjects.ADVICE, subjects.advice(advice.cluster, advice.job_id))
        if last is None:
            return advice.generation
        try:
            return max(advice.generation, Advice.model_validate_json(last[0]).generation)
        except ValueError:
            return advice.generation

    async def handle(self, advice: Advice, delivery: Delivery, just_took: str | None = None) -> Outcome:
        """One pass: observe, plan, take at most one step. `just_took`: the step this delivery took last;
        planned again at once, it is not taken twice in a row (Slurm has not shown its effect yet): the
        pass says look again instead."""
        observed = await self.slurm.observe(advice.job_id)
        newest = await self.newest_generation(advice)
        drains = await self._drains_to_do(advice) + await self._downs_to_do(advice, observed)
        p = plan(advice, observed, utcnow(), newest, self.partitions, drains,
                 self._ended.get((advice.cluster, advice.job_id, advice.generation, observed.restarts)),
                 await self._batch_step(advice, observed))
        if p.kind in ("converged", "abandoned"):
            await self._notice(advice, p)
            await self._finish(advice, "CONVERGED" if p.kind == "converged" else "ABANDONED", p.reason, p.detail)
            return DONE
        if self.mode == "observe":
            await self._observe_only(advice, observed, drains)
            return DONE
        await self.holds.touch(advice.cluster, advice.job_id)  # the watchdog sees we are alive
        if p.kind == "wait":
            return again(p.detail, p.delay)
        if not self.fence():
            # The lease may be another actuator's by now (NATS lost mid-reconcile): take no step; the
            # Advice goes back to the stream and the leader reconciles it from Slurm's state.
            log.warning("advice %s/%s gen %d: not the leader any more; %s left to the leader", advice.cluster,
                        advice.job_id, advice.generation, p.step)
            return again("not the leader any more", 1.0)
        if p.step is not None and p.step == just_took:
            return Outcome(False, f"{p.step} taken; verifying", VERIFY_AGAIN_S, inline=False)
        await self._notice(advice, p)
        return await self._take_step(advice, p, observed)

    async def _batch_step(self, advice: Advice, observed: Observed) -> BatchStep | None:
        """The batch step of the attempt Slurm shows, from its accounting, only when the job's record
        allows a refused launch (startability.py, rule 3); None when not asked or not known: then the
        attempt counts as one that ran."""
        if advice.operation != "restart" or not possibly_refused(observed) or observed.submitted is None:
            return None
        try:
            return await self.slurm.batch_step(advice.job_id, observed.submitted)
        except (TemporaryError, PermanentError) as exc:
            log.info("advice %s/%s gen %d: the batch step of restart %d is not known (%s): counted as run",
                     advice.cluster, advice.job_id, advice.generation, observed.restarts, exc)
            return None

    async def _notice(self, advice: Advice, p: Plan) -> None:
        """A plan's notice: a warning in the log and an audit entry (one per Advice and notice key)."""
        if not p.notice:
            return
        log.warning("advice %s/%s gen %d: %s", advice.cluster, advice.job_id, advice.generation, p.notice)
        await self._audit(advice, p.notice_action, p.notice[:1000],
                          f"actuator.{advice.cluster}.{advice.job_id}.{advice.generation}.{p.notice_key}")

    async def _drains_to_do(self, advice: Advice) -> tuple[Drain, ...]:
        """Node drains this Advice still calls for (none unless RELAUNCH_ACTUATOR_DRAIN_NODES is on)."""
        if not self.drain_nodes or not advice.exclude_nodes or advice.operation != "restart":
            return ()
        conditions = await self.slurm.node_conditions(sorted(set(advice.exclude_nodes)))
        return tuple(d for d in plan_drains(advice, conditions)
                     if (advice.cluster, advice.job_id, advice.generation, d.node) not in self._drain_rejected)

    async def _downs_to_do(self, advice: Advice, observed: Observed) -> tuple[Drain, ...]:
        """Lost nodes this Advice's job still holds, to mark DOWN (draining.py); only for an Advice with
        lost-node evidence, so no other reconcile pays for the look at the nodes."""
        if not self.down_lost_nodes or advice.operation != "restart" or observed.state not in ("RUNNING", "COMPLETING"):
            return ()
        lost = sorted(set(lost_nodes(advice)) & set(observed.nodes))
        if not lost:
            return ()
        conditions = await self.slurm.node_conditions(lost)
        return tuple(d for d in plan_downs(advice, observed.nodes, conditions)
                     if (advice.cluster, advice.job_id, advice.generation, d.node) not in self._drain_rejected)

    async def _observe_only(self, advice: Advice, observed: Observed, drains: tuple[Drain, ...] = ()) -> None:
        """Record every command act mode would run from here, run none, and finish the Advice."""
        prefix = f"actuator.{advice.cluster}.{advice.job_id}.{advice.generation}.observe"
        records, detail = observe_only(advice, observed, drains)
        for record in records:
            await self._audit(advice, record.action, record.detail, f"{prefix}.{record.key}")
            STEPS.labels(record.step, "observe").inc()
        await self._finish(advice, "ABANDONED", OBSERVE_MODE, detail)

    async def _drain(self, advice: Advice, p: Plan) -> None:
        """One node drain; a rejected drain is audited and not retried for this Advice (the restart goes on)."""
        assert p.drain is not None
        node = p.drain.node
        what = "drain" if p.drain.state == "DRAIN" else "down"
        key = f"actuator.{advice.cluster}.{advice.job_id}.{advice.generation}.{what}.{node}"
        if self.limit is not None:
            await self.limit.take()
        try:
            await self.slurm.run_command(p.argv)
        except PermanentError as exc:
            self._drain_rejected.add((advice.cluster, advice.job_id, advice.generation, node))
            await self._audit(advice, f"{what} rejected", str(exc)[:1000], key + ".rejected")
            return
        STEPS.labels(what, "act").inc()
        await self._audit(advice, "drain" if what == "drain" else "lost node marked down", p.audit, key)
        status = ReconcileStatus(cluster=advice.cluster, job_id=advice.job_id, generation=advice.generation,
                                 status="PENDING", reason=p.reason, step=what, detail=p.detail[:1000], at=utcnow())
        await self.bus.publish(subjects.event_reconcile(advice.cluster, advice.job_id), status, msg_id=key + ".status")

    async def _take_step(self, advice: Advice, p: Plan, observed: Observed) -> Outcome:
        """Run the plan's command; done when Slurm rejected it for good, else look again soon to verify."""
        assert p.step is not None and p.argv
        if p.step == "drain":
            await self._drain(advice, p)
            return Outcome(False, "step taken; verifying", STEP_VERIFY_S, step=p.step)
        job = advice.job_id
        key = f"actuator.{advice.cluster}.{job}.{advice.generation}.{p.step}.{observed.restarts}"
        if p.step in DISRUPTIVE:
            if self.limit is not None:
                await self.limit.take()  # TemporaryError(wait) when the cluster-wide budget is spent
            if p.step == "requeuehold":
                # Recorded before the command: if we die right after it, the watchdog can release.
                await self.holds.record(advice.cluster, job, advice.generation, advice.attempt)
        refusal_key = (advice.cluster, job, advice.generation, p.step)
        if p.step == "requeuehold" and observed.state in FAILED_STATES and observed.ended is not None:
            if len(self._ended) > 10_000:
                self._ended.clear()
            self._ended[(advice.cluster, job, advice.generation, observed.restarts + 1)] = observed.ended
        try:
            await self.slurm.run_command(p.argv)
        except PermanentError as exc:
            await self._audit(advice, f"{p.step} rejected", str(exc), key + ".rejected")
            await self._finish(advice, "ABANDONED", SCHEDULER_REJECTED, str(exc))
            return DONE
        except TemporaryError as exc:
            await self._refused(advice, p, key, refusal_key, exc)
            raise
        if (past := self.refusals.accepted(refusal_key)) is not None and past.warnings:
            log.warning("advice %s/%s gen %d: Slurm accepted %s after refusing it %d times over %.0f s",
                        advice.cluster, job, advice.generation, p.step, past.count, past.lasted_s)
        STEPS.labels(p.step, "act").inc()
        await self._audit(advice, p.step, p.audit, key)
        status = ReconcileStatus(cluster=advice.cluster, job_id=job, generation=advice.generation,
                                 status="PENDING", reason=p.reason, step=p.step, detail=p.detail, at=utcnow())
        await self.bus.publish(subjects.event_reconcile(advice.cluster, job), status, msg_id=key + ".status")
        return Outcome(False, "step taken; verifying", STEP_VERIFY_S, step=p.step)

    async def _refused(self, advice: Advice, p: Plan, key: str, refusal_key: tuple[str, str, int, str],
                       exc: TemporaryError) -> None:
        """A step Slurm refused for now: retried by the caller; a refusal that lasts is warned of and audited."""
        assert p.step is not None
        step = p.step
        REFUSALS.labels(step).inc()
        due = self.refusals.refused(refusal_key, str(exc)[:500], self.clock())
        if due is None:
            return
        text = describe(step, p.audit, due)
        log.warning("advice %s/%s gen %d: %s", advice.cluster, advice.job_id, advice.generation, text)
        try:
            await self._audit(advice, f"{step} refused", text[:1000], f"{key}.refused.{due.warnings}")
        except Exception as audit_exc:  # noqa: BLE001  (the warning is logged; the retry must go on)
            log.warning("could not publish the refusal audit entry: %s", audit_exc)

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
        if status == "CONVERGED":
            await observe_recovery(self.bus, advice, msg.at)
        await self.holds.forget(advice.cluster, advice.job_id)
        self.refusals.forget(advice.cluster, advice.job_id, advice.generation)
        for key in [k for k in self._ended if k[:3] == (advice.cluster, advice.job_id, advice.generation)]:
            del self._ended[key]
        log.info("advice %s/%s gen %d: %s (%s) %s", advice.cluster, advice.job_id, advice.generation,
                 status, reason, detail)


DISRUPTIVE = frozenset({"requeuehold", "cancel"})
"""Steps that stop a running job: these draw from the cluster-wide rate limit."""


STEP_VERIFY_S = 0.02
"""After a step, how soon the next pass observes Slurm again (its commands answer once slurmctld applied them)."""
VERIFY_AGAIN_S = 0.2
"""A step planned again right after it was taken: looked at again this much later, on a redelivery."""
STEPS_PER_DELIVERY = 6
"""Passes one delivery of an Advice may chain, each right after a step (docs/architecture.md, "Reconcile")."""


async def handle_advice(reconciler: Reconciler, advice: Advice, delivery: Delivery) -> None:
    """The Advice consumer. A pass that took a step is followed at once by another in the same delivery
    (requeuehold, release and StartTime=now follow each other without a redelivery between them; each
    pass observes Slurm first, so a crash between two passes loses nothing). A pass that waits naks with
    its delay, so that no delivery holds the consumer while Slurm gets on; ack once a pass is done."""
    last: str | None = None
    for _ in range(STEPS_PER_DELIVERY):
        outcome = await reconciler.handle(advice, delivery, just_took=last)
        if outcome.done:
            return
        if outcome.step is None or not outcome.inline:
            break
        last = outcome.step
        await asyncio.sleep(outcome.again_s)
    raise TemporaryError(outcome.detail, delay=outcome.again_s)
