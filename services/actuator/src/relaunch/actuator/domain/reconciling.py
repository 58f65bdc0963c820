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
  the caller passes those still to do, so a drained node is never drained again;
- CONVERGED means the successor can run (startability.py): it is past its launch, or pending with
  a reason that time resolves (Resources, Priority...) once Slurm's scheduler has looked at it; a
  successor Slurm will never start (BadConstraints...) is ABANDONED with Slurm's reason, never
  CONVERGED;
- a node the job requires (ReqNodeList, sbatch -w) is never excluded: the exclusion is dropped and
  said so (see exclusions for why dropping beats rewriting the job's required list);
- `StartTime=now` waits for the wall-clock second after the one that revoked the last attempt's
  job credentials (Slurm's credential rule, startability.py);
- a successor Slurm killed at launch (its credential revoked) is requeued again under the same
  Advice, at most MAX_LAUNCH_RETRIES times: only on Slurm's own evidence that its script never ran
  (its batch step, closed by slurmctld with no exit code: startability.py rule 3, launches.py), never
  on timing alone, and only while the attempt Slurm shows has it, which the requeue itself clears, so a
  replay never requeues twice. Without that evidence the attempt counts as one the job ran.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Literal

from relaunch.common.job_states import ENDED_UNFAILED, FINAL_STATES, TRANSIENT_STATES
from relaunch.common.schemas import Advice

from .commands import drain_argv, step_argv
from .draining import Drain
from .launches import BatchStep
from .observing import Observed
from .startability import (earliest_launch, launch_refused, launched, never_starts, possibly_refused,
                           required_conflicts)

Step = Literal["requeuehold", "exclude", "release", "start_now", "cancel", "drain"]

ELIGIBLE_SLACK = dt.timedelta(seconds=2)
"""A successor eligible within this much of now counts as eligible (clock granularity is 1 s)."""
POLL_FAST = 0.25
POLL_SLOW = 1.0
SCHEDULER_LOOK = dt.timedelta(seconds=30)
"""How long an eligible successor may stay pending with Reason=None (not yet looked at by Slurm's
scheduler) before it converges all the same: a long queue may take that long to reach it."""
MAX_LAUNCH_RETRIES = 3
"""Refused launches of one Advice's successor that are requeued again; past that, the failure is the decider's."""
ACCOUNTING_WAIT = dt.timedelta(seconds=5)
"""How long after a possibly refused successor ended its batch step's accounting is waited for; past that
(accounting off, slow or unreachable) the attempt counts as one that ran: no free retry on a guess."""

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
CANNOT_START = "successor cannot start"

# Audit actions of the notices (AuditEntry.action); the decider reads LAUNCH_REFUSED (its attempt
# index is the last part of the entry's idempotency key).
EXCLUDED_NODE_RUNNING = "restarted on an excluded node"
EXCLUSION_DROPPED = "exclusion dropped"
LAUNCH_REFUSED = "launch refused"


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
    notice_action: str = EXCLUDED_NODE_RUNNING
    notice_key: str = "excluded-node"
    """The notice's audit action and the tail of its idempotency key (one entry per distinct key)."""
    nodes: tuple[str, ...] = ()
    """exclude: the whole ExcNodeList to set."""
    argv: tuple[str, ...] = ()
    """step: the command that takes it (commands.py: every value checked)."""
    audit: str = ""
    """step: the audit entry's detail once the command is taken (the command itself)."""


@dataclass(frozen=True)
class WouldRun:
    """Observe mode: one command act mode would run, as its audit entry says it."""
    step: Step
    action: str
    detail: str
    key: str
    """The tail of the entry's idempotency key, after `actuator.<cluster>.<job>.<generation>.observe.`."""


def plan(advice: Advice, observed: Observed, now: dt.datetime, newest_generation: int,
         partitions: frozenset[str] = frozenset(), drains: tuple[Drain, ...] = (),
         ended_before_requeue: dt.datetime | None = None, batch: BatchStep | None = None) -> Plan:
    """`partitions`: the allowlist (empty: every partition). `drains`: the node drains still to do
    (empty unless drain is on). `ended_before_requeue`: the EndTime Slurm showed for the attempt this
    Advice requeued, when it had already ended then (a hint the caller remembers; None: unknown).
    `batch`: the batch step of the attempt Slurm shows, as its accounting recorded it (the caller looks
    it up only when startability.possibly_refused says it matters; None: not known)."""
    return _with_command(advice, observed, _plan(advice, observed, now, newest_generation, partitions, drains,
                                                 ended_before_requeue, batch))


def _with_command(advice: Advice, observed: Observed, p: Plan) -> Plan:
    """A step plan with the command it runs and the audit text that records it."""
    if p.step is None:
        return p
    if p.step == "drain":
        assert p.drain is not None
        argv = drain_argv(p.drain.node, p.drain.reason, p.drain.state)
    else:
        # The plan says which ExcNodeList to set (it leaves out nodes the job requires).
        nodes = p.nodes if p.step == "exclude" else tuple(sorted(set(observed.excluded) | set(advice.exclude_nodes)))
        argv = step_argv(p.step, advice.job_id, nodes)
    return replace(p, argv=argv, audit=" ".join(argv))


def _plan(advice: Advice, observed: Observed, now: dt.datetime, newest_generation: int,
          partitions: frozenset[str], drains: tuple[Drain, ...], ended_before_requeue: dt.datetime | None,
          batch: BatchStep | None = None) -> Plan:
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
        what = "mark lost node" if first.state == "DOWN" else "drain"
        return Plan("step", STEP_TAKEN, f"{what} {first.node} {first.state.lower()}: {first.reason}", step="drain",
                    drain=first)
    if advice.operation == "terminate":
        return _plan_terminate(observed)
    return _plan_restart(advice, observed, now, ended_before_requeue, batch)


def _plan_terminate(observed: Observed) -> Plan:
    if observed.state in FINAL_STATES:
        return Plan("converged", ALREADY_SATISFIED, f"job is {observed.state}")
    return Plan("step", STEP_TAKEN, "cancel the job", step="cancel")


def _plan_restart(advice: Advice, observed: Observed, now: dt.datetime,
                  ended_before_requeue: dt.datetime | None = None, batch: BatchStep | None = None) -> Plan:
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
    if possibly_refused(observed) and not launch_refused(observed, batch):
        closed = batch is not None and batch.state not in ("", "PENDING", "RUNNING")
        if not closed and observed.ended is not None and now < observed.ended + ACCOUNTING_WAIT:
            return Plan("wait", WAITING, f"successor (restart {observed.restarts}) failed at once; waiting for "
                        "Slurm's accounting of its batch step, which tells a refused launch from a script that "
                        "ran", delay=POLL_SLOW)
    if launch_refused(observed, batch):
        if observed.restarts - advice.attempt > MAX_LAUNCH_RETRIES:
            return Plan("converged", DESIRED_STATE_OBSERVED,
                        f"Slurm refused to launch the successor {observed.restarts - advice.attempt} times "
                        f"(restart {observed.restarts} is FAILED at launch); not requeued again by this Advice")
        if not observed.requeue_allowed:
            return Plan("abandoned", SCHEDULER_REJECTED, "the job was submitted with --no-requeue")
        notice = (f"Slurm killed the successor (restart {observed.restarts}) at launch, before its script ran: it "
                  f"started and ended in {_second(observed.started)}, the second of its requeue, and Slurm's "
                  "accounting shows its batch step closed by slurmctld, never run (CANCELLED, no exit code; "
                  "slurmd refused the launch, e.g. its job credential revoked); requeued again under this "
                  "Advice, no attempt spent")
        return Plan("step", STEP_TAKEN, notice, step="requeuehold", notice=notice, notice_action=LAUNCH_REFUSED,
                    notice_key=f"launch-refused.{observed.restarts}")
    exclude, dropped = exclusions(advice, observed)
    if state == "PENDING":
        missing = sorted(set(exclude) - set(observed.excluded))
        if missing:
            return Plan("step", STEP_TAKEN, f"exclude {','.join(missing)}" + _dropped_note(dropped, observed),
                        step="exclude", nodes=tuple(sorted(set(observed.excluded) | set(exclude))))
        if observed.held:
            return Plan("step", STEP_TAKEN, "release the held successor" + _dropped_note(dropped, observed),
                        step="release")
        if observed.eligible_at is not None and observed.eligible_at > now + ELIGIBLE_SLACK:
            earliest = earliest_launch(observed, ended_before_requeue)
            if earliest is not None and now < earliest:
                # Slurm's credential rule (startability.py, rule 2): launched in its requeue's second,
                # the successor would be killed at once ("Job credential revoked").
                return Plan("wait", WAITING, f"start now from {_second(earliest)} on, the second after the one "
                            "that revoked the last attempt's credentials", delay=(earliest - now).total_seconds())
            return Plan("step", STEP_TAKEN, "start now instead of after Slurm's requeue delay", step="start_now")
        if why := never_starts(observed, advice.exclude_nodes):  # dropped ones too: see never_starts
            detail = f"successor (restart {observed.restarts}) is pending: {why}" + _dropped_note(dropped, observed)
            return Plan("abandoned", CANNOT_START, detail, notice=detail, notice_action=CANNOT_START,
                        notice_key="cannot-start")
        if observed.reason in ("None", "") and observed.eligible_at is not None and now < (observed.eligible_at
                                                                                          + SCHEDULER_LOOK):
            return Plan("wait", WAITING, "successor is eligible; waiting for Slurm's scheduler to start it or say "
                        "why not", delay=POLL_FAST)
        return _converged(f"successor (restart {observed.restarts}) is pending, unheld and eligible now "
                          f"(Reason={observed.reason or 'None'})", dropped, observed)
    if not launched(observed, now):
        return Plan("wait", WAITING, f"successor is {state}, launching", delay=POLL_FAST)
    detail = f"successor (restart {observed.restarts}) is {state}"
    on_excluded = sorted(set(observed.nodes) & set(exclude))
    if not on_excluded:
        return _converged(detail, dropped, observed)
    # It left the hold before the exclusion was set (the watchdog, a person, or Slurm released it).
    # Requeueing it again would be a second restart: say so instead.
    notice = (f"{detail} on {','.join(on_excluded)}, which this Advice excludes: the successor left the hold "
              "before the exclusion was set (released by the watchdog or by hand?)")
    return Plan("converged", DESIRED_STATE_OBSERVED, notice + _dropped_note(dropped, observed), notice=notice)


def exclusions(advice: Advice, observed: Observed) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the Advice's exclusions to set, those dropped because the job requires them).

    Why drop rather than take the node out of ReqNodeList (which Slurm allows while the job is
    pending, and then runs it on another node): the required list is the user's explicit placement
    (`-w`), for reasons relaunch cannot see (data on local disks, a topology, a licence, a
    reservation), and a change to it stays for every later attempt. Dropping the exclusion leaves
    the job as the user wrote it and can at worst cost one attempt on a suspect node, which the
    policy bounds; rewriting it could run the job where the user did not want it. The ReconcileStatus
    detail and an audit entry say which node was kept and why, so the user can resubmit without it."""
    dropped = required_conflicts(observed, advice.exclude_nodes)
    return tuple(n for n in advice.exclude_nodes if n not in dropped), dropped


def _dropped_note(dropped: tuple[str, ...], observed: Observed) -> str:
    if not dropped:
        return ""
    return (f"; not excluded: {','.join(dropped)}, which the job requires (ReqNodeList={','.join(observed.required)},"
            " sbatch -w): Slurm would never start it with them excluded, and relaunch does not rewrite the nodes a "
            "job asks for (resubmit without them to leave them out)")


def _converged(detail: str, dropped: tuple[str, ...], observed: Observed) -> Plan:
    if not dropped:
        return Plan("converged", DESIRED_STATE_OBSERVED, detail)
    text = detail + _dropped_note(dropped, observed)
    return Plan("converged", DESIRED_STATE_OBSERVED, text, notice=text, notice_action=EXCLUSION_DROPPED,
                notice_key="exclusion-dropped")


def _second(at: dt.datetime | None) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S") if at is not None else "an unknown second"


def would_run(advice: Advice, observed: Observed) -> list[Step]:
    """Observe mode: every step a restart or terminate would take from the state seen now, in order.

    Nothing changes on the cluster, so the later steps are what act mode would do once each earlier
    one had taken effect (requeuehold -> exclude -> release -> start_now).
    """
    if advice.operation == "terminate":
        done = observed.state in FINAL_STATES
        return [] if done else ["cancel"]
    steps: list[Step] = []
    if observed.restarts <= advice.attempt:
        if observed.state in ENDED_UNFAILED or not observed.requeue_allowed:
            return []
        steps.append("requeuehold")
        held, excluded = True, ()
    else:
        held, excluded = observed.held, observed.excluded
    if set(exclusions(advice, observed)[0]) - set(excluded):
        steps.append("exclude")
    if held:
        steps.append("release")
    steps.append("start_now")
    return steps


def observe_only(advice: Advice, observed: Observed, drains: tuple[Drain, ...] = ()) -> tuple[list[WouldRun], str]:
    """Observe mode: the audit entries of every command act mode would run from here (drains first),
    and the detail of the ABANDONED status that ends the Advice."""
    records = [WouldRun("drain", "would drain", "observe mode: " + " ".join(drain_argv(d.node, d.reason)),
                        f"drain.{d.node}") for d in drains]
    steps = would_run(advice, observed)
    nodes = sorted(set(observed.excluded) | set(exclusions(advice, observed)[0]))
    for n, step in enumerate(steps, start=1):
        argv = " ".join(step_argv(step, advice.job_id, nodes))
        records.append(WouldRun(step, f"would {step}", f"observe mode, step {n} of {len(steps)}: {argv}", str(n)))
    done = [f"drain {d.node}" for d in drains] + list(steps)
    return records, f"would have run: {', '.join(done) or 'nothing'} (RELAUNCH_ACTUATOR_MODE=observe)"
