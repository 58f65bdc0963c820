"""decide(history, anomaly, policy, now, suspects) -> Decision. Pure; every stop names its rule.

The rules, in the order they are tried (the first that applies decides; docs/policy.md lists them):
  joins_open_advice      a further incident on an attempt whose Advice is still open joins that Advice
                         (its evidence is added; no second restart)
  already_decided        one attempt gets one decision (a later incident is only recorded)
  launch_refused         Slurm killed the attempt at launch, before the job's script ran (the actuator
                         says so only on Slurm's evidence: the attempt's batch step never ran); the
                         actuator requeued it under the Advice that started it: it joins that Advice and
                         spends no attempt. An attempt that shows it ran (a log line or progress of its
                         own, a step reached) is never taken for one, so a free retry can never let a
                         job run more attempts than max_attempts allows
  observe_only           the job's options are invalid: it is only observed
  straggler_report_only  straggler recovery is off for the job: a straggler is only reported
  user_cancelled         someone cancelled the job: never restarted
  do_not_restart         the resiliency extension's exit code 93 (or its log line): never restarted
  megatron_validation_failed  Megatron-LM's rerun state machine exited 17 (result validation failed)
  divergence_report_only a diverged run, and the job says divergence=report: only reported
  divergence             a diverged run (NaN loss, loss-scale collapse, skip storm): stopped and
                         cancelled by default; divergence=restart sends it through the rules below
  time_limit, preemption Slurm's time limit / a preemption, when the policy does not restart them
  log_unread             the job failed, no line explained it and its log could not be read: an error in
                         the job itself cannot be ruled out, so it is not restarted
  fault_not_restartable  the signature says a restart would fail the same way (action stop)
  hang_deadlock          hang evidence read from outside the job finds it stuck in its own code at the
                         same place (file:line) as the attempt before (hang_verdicts.deadlock)
  max_attempts           attempts in all, the first included
  class_budget           restarts per failure class (application and resource: none by default)
  restart_storm          K restarts within T and the job got no further than before them (not for
                         time limits and preemptions, which are the scheduler's doing)
  no_checkpoint          the job's last N failed attempts (failures_without_checkpoint, this one
                         included) saved no checkpoint since their restart: it is not making progress
                         (armed only once the job was seen saving one: a job whose saves relaunch cannot
                         read is never judged by them; not for time limits and preemptions)
  no_progress            the step reached did not pass the best step of the attempts before it (not
                         for a preemption: the attempt may not have had the time; not for a hang after
                         the attempt stepped forward: it made progress between its hangs, as a job that
                         starts again from step 0 does, and its silence may be a pause it takes)
  (a rule that stops a job that still runs and holds its nodes (a hang, a divergence) cancels it with
   a terminate Advice unless the policy says terminate_hung = false)
  within_budget          restart, leaving out the nodes attribution blames (capped by max_exclude, and
                         never so many that the job no longer fits its partition: exclusions.py)

A straggling job is still running, so a rule that refuses to restart it reports instead of stopping:
relaunch keeps watching it. Steps and exit codes come from the anomaly when the detector knows them,
else from the ledger's record of the attempt.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Literal

from relaunch.common.policies.model import Budgets, Policy
from relaunch.common.schemas import AnomalyDetected

from .attribution import Suspect
from .exclusions import plan_exclusions
from .history import AttemptRecord, History, RestartRecord, fault_class

__all__ = ["ADVICE_TTL", "DO_NOT_RESTART_EXIT", "AttemptRecord", "Budgets", "Decision", "History", "Policy",
           "RestartRecord", "decide"]

ADVICE_TTL = dt.timedelta(minutes=30)
"""An Advice not carried out within this time is abandoned as expired."""
DO_NOT_RESTART_EXIT = 93
"""NVIDIA resiliency extension: a rank that exits with this code asks that the job not be restarted."""
MEGATRON_RERUN_EXIT = 16
"""Megatron-LM's rerun state machine (EXIT_CODE_RESUME_TO_DISAMBIGUATE): it saved a checkpoint and asks to
be restarted, on other hardware, to tell a transient or faulty-GPU result from a real one: restarted."""
MEGATRON_VALIDATION_FAILED_EXIT = 17
"""Megatron-LM's rerun state machine (EXIT_CODE_FAILED_ON_RESULT_VALIDATION): the result is wrong the
same way on a rerun: not restarted."""


@dataclass(frozen=True)
class Decision:
    kind: Literal["restart", "terminate", "stop", "observe", "report", "join", "none"]
    rule: str
    reason: str
    generation: int = 0
    """restart, terminate: the new Advice's generation; join: the generation of the open Advice joined."""
    exclude_nodes: tuple[str, ...] = ()
    expires_at: dt.datetime | None = None
    fault_class: str = "unknown"
    left_in: tuple[str, ...] = ()
    """Suspects the restart does not leave out (max_exclude reached, or the partition too small)."""
    would: Decision | None = None
    """observe: the decision relaunch would have taken in act mode (recorded, never carried out)."""
    resume_step: int | None = None
    """restart: the step of the last checkpoint saved before the failure, where the successor should resume."""


def would_have(would: Decision) -> str:
    """`would` in words, for an observe decision's reason ("" when it would have done nothing)."""
    without = f" without {', '.join(would.exclude_nodes)}" if would.exclude_nodes else ""
    words = {"restart": f"restarted it{without}", "terminate": "cancelled it", "stop": "stopped it",
             "report": "only reported it"}.get(would.kind)
    return f"; in act mode relaunch would have {words} ({would.rule})" if words else ""


def decide(history: History, anomaly: AnomalyDetected, policy: Policy, now: dt.datetime,
           suspects: tuple[Suspect, ...] | None = None, deadlock: str | None = None) -> Decision:
    """`suspects` come from attribution; those confident enough are excluded (capped by policy).
    None (no attribution ran) falls back to the anomaly's own node hints. `deadlock`: why the hang is
    the program's own, the same place twice (hang_verdicts.deadlock); None: not known to be."""
    attempt = anomaly.attempt
    klass = fault_class(anomaly)
    record = history.attempt(attempt)
    exit_code = anomaly.exit_code if anomaly.exit_code is not None else record.exit_code if record else None
    # Still running and holding its nodes by nature: a hang, a divergence. (A crash is not: its line is
    # usually read while the job is ending by itself; one whose other ranks go on waiting is then a hang.)
    running = anomaly.kind in ("hang", "divergence")

    def stop(rule: str, reason: str) -> Decision:
        if anomaly.kind == "straggler":
            return Decision("report", rule, reason, fault_class=klass)
        if running and policy.terminate_hung and rule != "user_cancelled":
            # Not restarted, but not left to hold its nodes (hung, or burning them on garbage) until its
            # time limit either.
            what = {"hang": "is hung", "divergence": "has diverged"}.get(anomaly.kind, "is still running")
            return Decision("terminate", rule, f"{reason}; the job {what}, so it is cancelled to release its "
                            f"nodes (policy {policy.name!r}: terminate_hung)",
                            generation=history.last_generation + 1, expires_at=now + ADVICE_TTL, fault_class=klass)
        return Decision("stop", rule, reason, fault_class=klass)

    if attempt in history.decided_attempts:
        joined = history.open_restart(attempt, now)
        if joined is not None:
            return Decision("join", "joins_open_advice",
                            f"joined advice generation {joined.generation}: attempt {attempt} is already being "
                            f"restarted; {anomaly.category} ({anomaly.kind}) is added to its evidence, "
                            "no second restart", generation=joined.generation, fault_class=klass)
        return Decision("none", "already_decided", f"attempt {attempt} already has a decision", fault_class=klass)
    # An attempt that logged a line or reported progress of its own ran, whatever else was said of it.
    ran = frozenset({attempt}) if anomaly.source in ("log", "progress") else frozenset()
    if attempt in history.refused_launches(ran):
        began = history.restart_before(attempt)
        reason = (f"attempt {attempt} never ran: Slurm killed it at launch (its job credential was revoked) and "
                  "the actuator requeued it; it spends no attempt")
        if began is None:
            return Decision("none", "launch_refused", reason, fault_class=klass)
        return Decision("join", "launch_refused", f"joined advice generation {began.generation}: {reason}",
                        generation=began.generation, fault_class=klass)
    if policy.observe_only:
        # What relaunch would have done with the options set aside: recorded (docs/policy.md, "Errors").
        would = decide(history, anomaly, replace(policy, observe_only=False), now, suspects, deadlock)
        return Decision("observe", "observe_only",
                        "the job's relaunch options are invalid, so it is only observed: "
                        + "; ".join(policy.option_errors) + would_have(would), fault_class=klass, would=would)
    if anomaly.kind == "straggler" and not policy.straggler:
        return Decision("report", "straggler_report_only",
                        f"straggler reported, not acted on (the job's comment does not say straggler=on): "
                        f"{anomaly.summary}", fault_class=klass)
    if history.user_cancelled or anomaly.category == "slurm_cancelled":
        return stop("user_cancelled", "the job was cancelled by a user; relaunch never restarts that")
    if exit_code == DO_NOT_RESTART_EXIT or anomaly.category == "do_not_restart":
        how = f"exited with code {DO_NOT_RESTART_EXIT}" if exit_code == DO_NOT_RESTART_EXIT else "logged it"
        return stop("do_not_restart", f"the job asked not to be restarted (attempt {attempt} {how}: "
                                      "the resiliency extension's do-not-restart verdict)")
    if exit_code == MEGATRON_VALIDATION_FAILED_EXIT or anomaly.category == "megatron_validation_failed":
        return stop("megatron_validation_failed",
                    f"Megatron-LM's rerun state machine found the result wrong the same way when it ran again "
                    f"(attempt {attempt} exited {MEGATRON_VALIDATION_FAILED_EXIT}): a restart would repeat it")
    if anomaly.kind == "divergence":
        if policy.divergence == "report":
            return Decision("report", "divergence_report_only",
                            f"divergence reported, not acted on (the job's comment says divergence=report): "
                            f"{anomaly.summary}", fault_class=klass)
        if policy.divergence == "stop":
            return stop("divergence", f"{anomaly.summary} (policy {policy.name!r}: divergence=stop; the job's "
                                      f"comment may say divergence=restart or divergence=report)")
    if anomaly.category == "slurm_time_limit" and not policy.restart_on_time_limit:
        return stop("time_limit", f"the job reached Slurm's time limit and policy {policy.name!r} does not "
                                  "restart after a time limit (time_limit=off)")
    if anomaly.category == "slurm_preempted" and not policy.restart_on_preemption:
        return stop("preemption", f"the job was preempted and policy {policy.name!r} does not restart after "
                                  "a preemption (preemption=off)")
    if anomaly.category == "log_unread":
        return stop("log_unread", f"not restarted: {anomaly.summary}")
    rerun = exit_code == MEGATRON_RERUN_EXIT or anomaly.category == "megatron_rerun_requested"
    if rerun:
        klass = "hardware"  # the rerun tells a faulty GPU from a real result: a hardware question
    if anomaly.action == "stop" and not rerun and anomaly.kind != "divergence":
        return stop("fault_not_restartable",
                    f"{anomaly.category} ({anomaly.fault_domain} fault): a restart would fail the same way")
    if deadlock and anomaly.kind == "hang":
        return stop("hang_deadlock", deadlock)
    used = history.attempts_used(attempt, ran)
    if used >= policy.max_attempts:
        return stop("max_attempts", f"max_attempts={policy.max_attempts} reached: attempt {used} of "
                                    f"{policy.max_attempts} failed ({anomaly.category})")
    spent, budget = history.restarts_by_class()[klass], policy.budgets.of(klass)
    if spent >= budget:
        return stop("class_budget", f"{anomaly.category} is a {klass} fault and policy {policy.name!r} allows "
                                    f"{budget} {klass} restart(s) per job; {spent} already made")
    steps = [s for s in (anomaly.last_step, record.high_step if record else None) if s is not None]
    step = max(steps, default=None)
    # Time limits and preemptions are the scheduler's doing, not a crash loop: no storm. A preempted
    # attempt may simply not have had the time to get further: no progress rule either.
    storm = "" if klass == "scheduler" else _storm(history, attempt, step, policy, now)
    if storm:
        return stop("restart_storm", storm)
    without = _without_checkpoint(history, attempt, policy, ran) if klass != "scheduler" else ""
    if without:
        return stop("no_checkpoint", without)
    # A hang after the attempt stepped forward is not "no progress": it made progress between its hangs.
    progressed = anomaly.kind == "hang" and anomaly.advanced is True
    if policy.stop_without_progress and attempt >= 1 and step is not None and anomaly.category != "slurm_preempted" \
            and not progressed:
        before = history.high_step(0, attempt - 1)
        if before is not None and step <= before:
            return stop("no_progress", f"attempt {attempt} reached step {step}, no further than the step {before} "
                                       "reached before the last restart: restarting again would repeat it")
    return _restart(history, anomaly, policy, now, suspects, klass, spent, budget, used)


def _without_checkpoint(history: History, attempt: int, policy: Policy, ran: frozenset[int]) -> str:
    """Why the job is not making progress by its checkpoints, or '' when it is (or cannot be told)."""
    limit = policy.failures_without_checkpoint
    if limit <= 0 or not history.saves:
        return ""
    count = history.failures_without_checkpoint(attempt, ran)
    if count < limit:
        return ""
    last = history.last_save(attempt)
    where = f"; its last checkpoint is step {last.step}, saved by attempt {last.attempt}" if last else ""
    return (f"{count} failed attempts in a row saved no checkpoint since their restart (policy {policy.name!r}: "
            f"failures_without_checkpoint={limit}){where}: the job is not making progress, restarting it again "
            "would repeat the same work")


def _storm(history: History, attempt: int, step: int | None, policy: Policy, now: dt.datetime) -> str:
    """Why the recent restarts are a storm, or '' when they are not. Restarts after a time limit or a
    preemption do not count. Progress is a step past the best one reached before the storm's first
    restart; no step reported since then is no progress."""
    if policy.storm_restarts <= 0:
        return ""
    window = dt.timedelta(seconds=policy.storm_window_s)
    recent = [r for r in history.restarts if now - r.at <= window and r.fault_class != "scheduler"]
    if len(recent) < policy.storm_restarts:
        return ""
    first = min(r.attempt for r in recent)
    before = history.high_step(0, first)
    later = [s for s in (history.high_step(first + 1, attempt), step) if s is not None]
    after = max(later, default=None)
    if after is not None and (before is None or after > before):
        return ""
    progress = ("no step reported since" if after is None
                else f"best step {after} since, against {before} before")
    return (f"{len(recent)} restarts already within {policy.storm_window_s} s (policy {policy.name!r} allows "
            f"{policy.storm_restarts} without progress) and no progress: {progress}")


def _restart(history: History, anomaly: AnomalyDetected, policy: Policy, now: dt.datetime,
             suspects: tuple[Suspect, ...] | None, klass: str, spent: int, budget: int, used: int) -> Decision:
    candidates: list[tuple[str, float | None]]
    if suspects is not None:
        candidates = [(s.node, s.confidence) for s in suspects if s.excluded]
    else:
        candidates = [(n, None) for n in anomaly.nodes] if anomaly.action == "restart_excluding" else []
    record = history.attempt(anomaly.attempt)
    # The job's size: the nodes of the failed attempt as observed, else those the anomaly names.
    job_size = max(len(record.nodes) if record and record.nodes else len(set(anomaly.nodes)), 1)
    plan = plan_exclusions(candidates, policy.max_exclude, job_size, history.partition_nodes,
                           history.excluded_nodes(), history.partition)
    exclude = plan.kept
    why = "".join(f"; without {s.node}: {', '.join(s.reasons)}" for s in suspects or () if s.node in exclude)
    return Decision(
        "restart", "within_budget",
        f"{anomaly.category}: {anomaly.summary}; restarting (attempt {used + 1} of at most {policy.max_attempts}; "
        f"{klass} restart {spent + 1} of {budget})" + why + (f"; {plan.note}" if plan.note else ""),
        generation=history.last_generation + 1, exclude_nodes=exclude, expires_at=now + ADVICE_TTL,
        fault_class=klass, left_in=plan.capped + plan.unschedulable,
        resume_step=last.step if (last := history.last_save(anomaly.attempt)) is not None else None,
    )
