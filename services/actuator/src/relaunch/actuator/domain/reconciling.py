"""plan(advice, observed, now, newest_generation) -> the next step, a wait, or a terminal outcome.

Level-triggered (controller-runtime style): the plan depends only on the Advice and on the
scheduler's state read just now, never on which event woke us. Invariants:
- a requeue is planned only while Slurm's restart counter still equals the failed attempt's, so a
  replay after any crash can never restart a job twice (the counter is the idempotency record);
- every other step is planned only when the state shows it is not yet done;
- Slurm quirk: a requeued job gets BeginTime = now+120 s; `StartTime=now` is only effective once
  the job is PENDING (while COMPLETING it is overwritten), so we wait for PENDING first;
- ExcNodeList can only be changed while the job is PENDING;
- drains (optional, see draining.py) come first, one per pass, and only while the Advice is live:
  the caller passes those still to do, so a drained node is never drained again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from relaunch.common.job_states import FAILED_STATES, TRANSIENT_STATES
from relaunch.common.schemas import Advice

from .draining import Drain
from .observing import Observed

Step = Literal["requeuehold", "exclude", "release", "start_now", "cancel", "drain"]

ELIGIBLE_SLACK = dt.timedelta(seconds=2)
"""A successor eligible within this much of now counts as eligible (clock granularity is 1 s)."""
POLL_FAST = 0.25
POLL_SLOW = 1.0

# Bounded reasons (ReconcileStatus.reason).
DESIRED_STATE_OBSERVED = "desired state observed"
ALREADY_SATISFIED = "already satisfied"
SUPERSEDED = "superseded by a newer generation"
EXPIRED = "expired"
JOB_GONE = "job gone"
SCHEDULER_REJECTED = "scheduler rejected"
STEP_TAKEN = "step taken"
WAITING = "waiting"
PARTITION_NOT_ALLOWED = "partition not allowed"
OBSERVE_MODE = "observe mode"


@dataclass(frozen=True)
class Plan:
    kind: Literal["step", "wait", "converged", "abandoned"]
    reason: str
    detail: str = ""
    step: Step | None = None
    delay: float = 0.0
    drain: Drain | None = None
    notice: str = ""
    """Something the operator should hear about although the plan goes on (logged as a warning, audited)."""


def plan(advice: Advice, observed: Observed, now: dt.datetime, newest_generation: int,
         partitions: frozenset[str] = frozenset(), drains: tuple[Drain, ...] = ()) -> Plan:
    """`partitions`: the allowlist (empty: every partition). `drains`: the node drains still to do
    (empty unless drain is on)."""
    if newest_generation > advice.generation:
        return Plan("abandoned", SUPERSEDED, f"generation {newest_generation} exists")
    if now > advice.expires_at:
        return Plan("abandoned", EXPIRED, f"expired at {advice.expires_at.isoformat()}")
    if not observed.exists:
        return Plan("abandoned", JOB_GONE, "the scheduler no longer knows the job")
    if partitions and observed.partition not in partitions:
        return Plan("abandoned", PARTITION_NOT_ALLOWED,
                    f"partition {observed.partition!r} is not in the actuator's allowlist {sorted(partitions)}")
    if drains:
        first = drains[0]
        return Plan("step", STEP_TAKEN, f"drain {first.node}: {first.reason}", step="drain", drain=first)
    if advice.operation == "terminate":
        return _plan_terminate(observed)
    return _plan_restart(advice, observed, now)


def _plan_terminate(observed: Observed) -> Plan:
    if observed.state in FAILED_STATES or observed.state in ("COMPLETED", "CANCELLED"):
        return Plan("converged", ALREADY_SATISFIED, f"job is {observed.state}")
    return Plan("step", STEP_TAKEN, "cancel the job", step="cancel")


def _plan_restart(advice: Advice, observed: Observed, now: dt.datetime) -> Plan:
    state = observed.state
    if observed.restarts <= advice.attempt:
        # The failed attempt has not been requeued yet.
        if state in TRANSIENT_STATES:
            return Plan("wait", WAITING, f"job is {state}", delay=POLL_FAST)
        if state == "COMPLETED":
            return Plan("abandoned", ALREADY_SATISFIED, "the attempt completed successfully; nothing to restart")
        if state == "CANCELLED":
            return Plan("abandoned", ALREADY_SATISFIED, "the job was cancelled; relaunch never restarts that")
        if state == "PENDING":
            return Plan("wait", WAITING, "job is pending and was not requeued yet", delay=POLL_SLOW)
        if not observed.requeue_allowed:
            return Plan("abandoned", SCHEDULER_REJECTED, "the job was submitted with --no-requeue")
        return Plan("step", STEP_TAKEN, f"requeue attempt {advice.attempt} in held state (job is {state})",
                    step="requeuehold")
    # The successor exists (restart counter advanced): make it runnable, then verify.
    if state in TRANSIENT_STATES:
        return Plan("wait", WAITING, f"successor is {state}", delay=POLL_FAST)
    if state == "PENDING":
        missing = sorted(set(advice.exclude_nodes) - set(observed.excluded))
        if missing:
            return Plan("step", STEP_TAKEN, f"exclude {','.join(missing)}", step="exclude")
        if observed.held:
            return Plan("step", STEP_TAKEN, "release the held successor", step="release")
        if observed.eligible_at is not None and observed.eligible_at > now + ELIGIBLE_SLACK:
            return Plan("step", STEP_TAKEN, "start now instead of after Slurm's requeue delay", step="start_now")
        return Plan("converged", DESIRED_STATE_OBSERVED,
                    f"successor (restart {observed.restarts}) is pending, unheld and eligible now")
    detail = f"successor (restart {observed.restarts}) is {state}"
    on_excluded = sorted(set(observed.nodes) & set(advice.exclude_nodes))
    if not on_excluded:
        return Plan("converged", DESIRED_STATE_OBSERVED, detail)
    # It left the hold before the exclusion was set (the watchdog, a person, or Slurm released it).
    # Requeueing it again would be a second restart: say so instead.
    notice = (f"{detail} on {','.join(on_excluded)}, which this Advice excludes: the successor left the hold "
              "before the exclusion was set (released by the watchdog or by hand?)")
    return Plan("converged", DESIRED_STATE_OBSERVED, notice, notice=notice)


def would_run(advice: Advice, observed: Observed) -> list[Step]:
    """Observe mode: every step a restart or terminate would take from the state seen now, in order.

    Nothing changes on the cluster, so the later steps are what act mode would do once each earlier
    one had taken effect (requeuehold -> exclude -> release -> start_now).
    """
    if advice.operation == "terminate":
        done = observed.state in FAILED_STATES or observed.state in ("COMPLETED", "CANCELLED")
        return [] if done else ["cancel"]
    steps: list[Step] = []
    if observed.restarts <= advice.attempt:
        if observed.state in ("COMPLETED", "CANCELLED") or not observed.requeue_allowed:
            return []
        steps.append("requeuehold")
        held, excluded = True, ()
    else:
        held, excluded = observed.held, observed.excluded
    if set(advice.exclude_nodes) - set(excluded):
        steps.append("exclude")
    if held:
        steps.append("release")
    steps.append("start_now")
    return steps
