"""The restart plan against Slurm's rules on who can start and when (domain/startability.py).

The job objects hold the values real Slurm 22.05.8 showed on the local stack (see the module's docstring)."""

import datetime as dt

import pytest

from relaunch.actuator.domain.launches import BatchStep
from relaunch.actuator.domain.observing import Observed
from relaunch.actuator.domain.rest_values import observed_from_rest
from relaunch.actuator.domain.reconciling import (
    ACCOUNTING_WAIT, CANNOT_START, EXCLUSION_DROPPED, LAUNCH_REFUSED, MAX_LAUNCH_RETRIES, SCHEDULER_LOOK, plan, would_run,
)
from relaunch.actuator.domain.startability import earliest_launch, launch_refused, never_starts
from relaunch.common.schemas import Advice

NOW = dt.datetime(2026, 12, 1, 7, 15, 44, 300_000, tzinfo=dt.UTC)

T_BAD = int(dt.datetime(2026, 12, 1, 7, 18, 1, tzinfo=dt.UTC).timestamp())
T_REFUSED = int(dt.datetime(2026, 12, 1, 7, 15, 44, tzinfo=dt.UTC).timestamp())
# A 2-node job submitted with -w node1,node2 whose successor was given ExcNodeList=node2 (22.05.8;
# the fields relaunch reads of its `squeue --json` object, in 22.05's shapes).
BAD_CONSTRAINTS = {
    "job_id": 5, "name": "wrap", "user_id": 0, "group_id": 0, "priority": 0, "job_state": "PENDING",
    "state_reason": "BadConstraints", "requeue": True, "restart_cnt": 1, "exit_code": 0, "submit_time": T_BAD,
    "eligible_time": T_BAD, "start_time": 0, "end_time": 0, "partition": "debug", "required_nodes": "node[1-2]",
    "excluded_nodes": "node2", "nodes": "", "node_count": 2}
# The successor of a job that failed at 07:15:44.027, requeued, released and started now at .170; the
# scheduler placed it at .485 on the same node, and slurmd refused it: "Job credential revoked".
REFUSED = {
    "job_id": 3, "name": "jobA.sh", "user_id": 0, "group_id": 0, "priority": 4294901753, "job_state": "FAILED",
    "state_reason": "NonZeroExitCode", "requeue": True, "restart_cnt": 1, "exit_code": 256,
    "submit_time": T_REFUSED, "eligible_time": T_REFUSED, "start_time": T_REFUSED, "end_time": T_REFUSED,
    "partition": "debug", "required_nodes": "node1", "excluded_nodes": "", "nodes": "node1", "node_count": 1}


def advice(**kw) -> Advice:
    base = dict(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=30))
    return Advice(**{**base, **kw})


def obs(**kw) -> Observed:
    return Observed(exists=True, **kw)


def scontrol(job: dict) -> Observed:
    return observed_from_rest(job)


# --- item: CONVERGED means the successor can run ----------------------------------------------------


def test_scontrol_fields_the_plan_needs_are_read():
    o = scontrol(BAD_CONSTRAINTS)
    assert o.required == ("node1", "node2") and o.excluded == ("node2",) and o.num_nodes == 2
    assert not o.held, "Slurm sets Priority=0 on a job it will not start: that is not a hold to release"
    r = scontrol(REFUSED)
    assert r.exit_code == "1:0" and r.started == r.ended == r.submitted == dt.datetime(2026, 12, 1, 7, 15, 44,
                                                                                       tzinfo=dt.UTC)


def test_an_exclusion_of_a_required_node_is_dropped_and_said_so():
    a = advice(exclude_nodes=["node2", "node3"])
    held = obs(state="PENDING", restarts=1, held=True, required=("node1", "node2"))
    p = plan(a, held, NOW, 1)
    assert (p.step, p.nodes) == ("exclude", ("node3",)), "node2 is required: only node3 is excluded"
    assert "not excluded: node2, which the job requires" in p.detail
    assert would_run(a, held) == ["exclude", "release", "start_now"]
    # Nothing left to exclude: straight to release, and the final status and an audit entry say why.
    only = advice(exclude_nodes=["node2"])
    assert plan(only, held, NOW, 1).step == "release"
    assert would_run(only, held) == ["release", "start_now"]
    running = obs(state="RUNNING", restarts=1, nodes=("node1", "node2"), required=("node1", "node2"))
    p = plan(only, running, NOW, 1)
    assert p.kind == "converged" and p.notice_action == EXCLUSION_DROPPED
    assert "not excluded: node2, which the job requires (ReqNodeList=node1,node2, sbatch -w)" in p.detail
    assert p.notice == p.detail
    # A node that is excluded as asked and was never required makes no notice.
    assert plan(advice(exclude_nodes=["node3"]), obs(state="RUNNING", restarts=1, nodes=("node1",)), NOW,
                1).notice == ""


def test_a_successor_slurm_will_never_start_is_abandoned_not_converged():
    later = dt.datetime(2026, 12, 1, 7, 18, 5, tzinfo=dt.UTC)
    p = plan(advice(exclude_nodes=["node2"]), scontrol(BAD_CONSTRAINTS), later, 1)
    assert (p.kind, p.reason) == ("abandoned", CANNOT_START)
    assert "Reason=BadConstraints" in p.detail and "requires node2 (ReqNodeList) and excludes it too" in p.detail
    assert p.notice and p.notice_action == CANNOT_START
    # Too few nodes left in the partition after the exclusion: the same reason, said differently.
    small = obs(state="PENDING", restarts=1, reason="BadConstraints", excluded=("node4",), num_nodes=4)
    assert "asks for 4 node(s) without node4" in never_starts(small)
    # A required node that relaunch leaves out (drained, say) and Slurm reports unavailable.
    drained = obs(state="PENDING", restarts=1, reason="ReqNodeNotAvail,_UnavailableNodes:node[2-3]",
                  required=("node1", "node2"))
    assert plan(advice(exclude_nodes=["node2"]), drained, NOW, 1).kind == "abandoned"
    # ... but a required node that is merely down for now is waited for like any resource.
    down = Observed(**{**drained.__dict__, "excluded": ("node4",)})
    assert plan(advice(exclude_nodes=["node4"]), down, NOW, 1).kind == "converged"


def test_an_eligible_successor_converges_once_the_scheduler_has_looked_at_it():
    fresh = obs(state="PENDING", restarts=1, eligible_at=NOW, reason="None")
    assert plan(advice(), fresh, NOW, 1).kind == "wait"
    assert plan(advice(), fresh, NOW + SCHEDULER_LOOK + dt.timedelta(seconds=1), 1).kind == "converged"
    assert plan(advice(), obs(state="PENDING", restarts=1, eligible_at=NOW, reason="Resources"), NOW,
                1).kind == "converged"


def test_running_converges_only_past_the_launch_second():
    started = NOW.replace(microsecond=0)
    running = obs(state="RUNNING", restarts=1, started=started)
    assert plan(advice(), running, NOW, 1).kind == "wait"
    assert plan(advice(), running, started + dt.timedelta(seconds=1), 1).kind == "converged"


# --- item: a successor Slurm kills at launch is not a failed attempt --------------------------------


def test_start_now_waits_for_the_second_after_the_requeue():
    submitted = dt.datetime(2026, 12, 1, 7, 15, 44, tzinfo=dt.UTC)
    pending = obs(state="PENDING", restarts=1, submitted=submitted, eligible_at=submitted + dt.timedelta(seconds=121))
    assert earliest_launch(pending) == submitted + dt.timedelta(seconds=1)
    for at in (submitted, submitted + dt.timedelta(milliseconds=170), submitted + dt.timedelta(milliseconds=999)):
        p = plan(advice(), pending, at, 1)
        assert p.kind == "wait" and p.step is None, at
        assert 0 < p.delay <= 1.0
    assert plan(advice(), pending, submitted + dt.timedelta(seconds=1), 1).step == "start_now"
    # Released first: the hold and the exclusion are not subject to the rule (they start nothing).
    assert plan(advice(), obs(state="PENDING", restarts=1, held=True, submitted=submitted), submitted, 1).step == \
        "release"


def test_an_attempt_that_ended_before_its_requeue_was_revoked_when_it_ended():
    # Failed at :18.938 and requeued at :19.052 (SubmitTime :19): Slurm revoked its credentials at :18,
    # so the successor may start within :19 (seen on 22.05.8: launched at :19.976 and ran).
    submitted = dt.datetime(2026, 12, 1, 7, 29, 19, tzinfo=dt.UTC)
    ended = dt.datetime(2026, 12, 1, 7, 29, 18, tzinfo=dt.UTC)
    pending = obs(state="PENDING", restarts=1, submitted=submitted, eligible_at=submitted + dt.timedelta(seconds=121))
    at = submitted + dt.timedelta(milliseconds=300)
    assert plan(advice(), pending, at, 1).kind == "wait", "without the hint, only SubmitTime is known"
    assert plan(advice(), pending, at, 1, ended_before_requeue=ended).step == "start_now"
    assert plan(advice(), pending, ended + dt.timedelta(milliseconds=999), 1, ended_before_requeue=ended).kind == \
        "wait"


NEVER_RAN = BatchStep("CANCELLED", "")
"""The refused successor's batch step in sacct (22.05.8): closed by slurmctld, no exit code."""
RAN = BatchStep("FAILED", "1:0")
"""A script that ran and exited 1 at once."""


def test_a_refused_launch_is_requeued_again_under_the_same_advice_and_audited():
    refused = scontrol(REFUSED)
    assert launch_refused(refused, NEVER_RAN)
    p = plan(advice(), refused, NOW, 1, batch=NEVER_RAN)
    assert (p.kind, p.step) == ("step", "requeuehold")
    assert p.notice_action == LAUNCH_REFUSED and p.notice_key == "launch-refused.1"
    assert "killed the successor (restart 1) at launch" in p.notice and "no attempt spent" in p.notice
    # Once requeued, the pending successor no longer looks refused: a replay never requeues twice.
    again = obs(state="PENDING", restarts=2, held=True, submitted=refused.submitted)
    assert plan(advice(), again, NOW, 1).step == "release"
    # Bounded: after MAX_LAUNCH_RETRIES refusals the failure is the decider's to judge.
    last = Observed(**{**refused.__dict__, "restarts": MAX_LAUNCH_RETRIES + 1})
    assert plan(advice(), last, NOW, 1, batch=NEVER_RAN).kind == "converged"


@pytest.mark.parametrize("change", [
    {"exit_code": "2:0"},                                                            # the script's own exit code
    {"ended": dt.datetime(2026, 12, 1, 7, 15, 45, tzinfo=dt.UTC)},                    # it ran into the next second
    {"started": dt.datetime(2026, 12, 1, 7, 15, 46, tzinfo=dt.UTC),
     "ended": dt.datetime(2026, 12, 1, 7, 15, 46, tzinfo=dt.UTC)},                    # started after its requeue second
    {"restarts": 0},                                                                 # a first attempt
    {"state": "COMPLETED", "exit_code": "0:0"},
])
def test_a_failure_of_the_job_itself_is_not_taken_for_a_refused_launch(change):
    o = Observed(**{**scontrol(REFUSED).__dict__, **change})
    assert not launch_refused(o, NEVER_RAN)
    if o.restarts:
        assert plan(advice(), o, NOW, 1, batch=NEVER_RAN).step != "requeuehold"


def test_a_script_that_failed_in_the_second_of_its_requeue_is_no_refused_launch():
    # Issue 36: the job's record is the refused launch's to the second (FAILED 1:0, started and ended in the
    # second of its requeue), but its batch step ran: the failure is the job's own, and it spends an attempt.
    failed = scontrol(REFUSED)
    assert not launch_refused(failed, RAN)
    p = plan(advice(), failed, NOW, 1, batch=RAN)
    assert (p.kind, p.step, p.notice) == ("converged", None, "") and "is FAILED" in p.detail


def test_without_slurms_accounting_a_fast_failure_waits_briefly_then_counts_as_run():
    failed = scontrol(REFUSED)
    for batch in (None, BatchStep("RUNNING", "")):  # not recorded yet / not closed yet
        assert not launch_refused(failed, batch)
        waiting = plan(advice(), failed, NOW, 1, batch=batch)
        assert waiting.kind == "wait" and "accounting of its batch step" in waiting.detail
        later = plan(advice(), failed, failed.ended + ACCOUNTING_WAIT, 1, batch=batch)
        assert later.kind == "converged" and later.step is None, "never a free retry on a guess"
