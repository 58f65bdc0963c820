"""plan(): every branch, and the exactly-once invariant under replay."""

import datetime as dt

import pytest

from relaunch.actuator.domain.observing import Observed
from relaunch.actuator.domain.reconciling import plan
from relaunch.common.schemas import Advice

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def advice(**kw) -> Advice:
    base = dict(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=30))
    return Advice(**{**base, **kw})


def obs(**kw) -> Observed:
    return Observed(exists=True, **kw)


@pytest.mark.parametrize("state", ["FAILED", "RUNNING", "NODE_FAIL", "TIMEOUT"])
def test_failed_attempt_is_requeued_in_held_state(state):
    p = plan(advice(), obs(state=state, restarts=0), NOW, 1)
    assert (p.kind, p.step) == ("step", "requeuehold")


def test_completing_attempt_is_waited_for():
    assert plan(advice(), obs(state="COMPLETING", restarts=0), NOW, 1).kind == "wait"


def test_held_successor_is_released():
    p = plan(advice(), obs(state="PENDING", restarts=1, held=True), NOW, 1)
    assert (p.kind, p.step) == ("step", "release")


def test_exclusions_are_set_before_release():
    p = plan(advice(exclude_nodes=["node2"]), obs(state="PENDING", restarts=1, held=True), NOW, 1)
    assert (p.kind, p.step) == ("step", "exclude")
    p = plan(advice(exclude_nodes=["node2"]), obs(state="PENDING", restarts=1, held=True, excluded=("node2",)), NOW, 1)
    assert p.step == "release"


def test_slurms_requeue_delay_is_cut_short():
    p = plan(advice(), obs(state="PENDING", restarts=1, eligible_at=NOW + dt.timedelta(seconds=120)), NOW, 1)
    assert (p.kind, p.step) == ("step", "start_now")


def test_eligible_or_running_successor_converges():
    # Pending with a reason time resolves, once Slurm's scheduler has looked at it (Reason=None: not yet).
    assert plan(advice(), obs(state="PENDING", restarts=1, eligible_at=NOW, reason="Priority"), NOW, 1).kind == \
        "converged"
    assert plan(advice(), obs(state="PENDING", restarts=1, eligible_at=NOW, reason="None"), NOW, 1).kind == "wait"
    assert plan(advice(), obs(state="RUNNING", restarts=1), NOW, 1).kind == "converged"
    assert plan(advice(), obs(state="COMPLETED", restarts=1), NOW, 1).kind == "converged"


def test_a_successor_running_on_an_excluded_node_converges_with_a_notice_and_no_second_requeue():
    a = advice(exclude_nodes=["node2", "node3"])
    p = plan(a, obs(state="RUNNING", restarts=1, nodes=("node1", "node3")), NOW, 1)
    assert (p.kind, p.step) == ("converged", None)
    assert p.notice == p.detail == ("successor (restart 1) is RUNNING on node3, which this Advice excludes: the "
                                    "successor left the hold before the exclusion was set (released by the "
                                    "watchdog or by hand?)")
    assert plan(a, obs(state="RUNNING", restarts=1, nodes=("node1", "node4")), NOW, 1).notice == ""
    assert plan(advice(), obs(state="RUNNING", restarts=1, nodes=("node3",)), NOW, 1).notice == ""


@pytest.mark.parametrize("restarts", [1, 2, 5])
@pytest.mark.parametrize("state", ["FAILED", "RUNNING", "PENDING", "COMPLETING", "COMPLETED"])
def test_replay_after_the_requeue_never_requeues_again(restarts, state):
    for held in (True, False):
        p = plan(advice(attempt=0), obs(state=state, restarts=restarts, held=held), NOW, 1)
        assert p.step != "requeuehold", (state, restarts, held)


def test_terminal_outcomes():
    assert plan(advice(), Observed.gone(), NOW, 1).reason == "job gone"
    assert plan(advice(), obs(state="FAILED"), NOW, 2).reason == "superseded by a newer generation"
    assert plan(advice(), obs(state="FAILED"), NOW + dt.timedelta(hours=1), 1).reason == "expired"
    assert plan(advice(), obs(state="COMPLETED", restarts=0), NOW, 1).kind == "abandoned"
    assert plan(advice(), obs(state="CANCELLED", restarts=0), NOW, 1).kind == "abandoned"
    assert plan(advice(), obs(state="FAILED", requeue_allowed=False), NOW, 1).reason == "scheduler rejected"


def test_terminate():
    assert plan(advice(operation="terminate"), obs(state="RUNNING"), NOW, 1).step == "cancel"
    assert plan(advice(operation="terminate"), obs(state="FAILED"), NOW, 1).kind == "converged"


def test_partition_allowlist():
    p = plan(advice(), obs(state="FAILED", partition="prod"), NOW, 1, frozenset({"debug"}))
    assert (p.kind, p.reason) == ("abandoned", "partition not allowed")
    assert plan(advice(), obs(state="FAILED", partition="debug"), NOW, 1, frozenset({"debug"})).step == "requeuehold"
    assert plan(advice(), obs(state="FAILED", partition="prod"), NOW, 1).step == "requeuehold"


def test_observe_mode_lists_every_step_act_mode_would_take():
    from relaunch.actuator.domain.reconciling import would_run

    assert would_run(advice(), obs(state="FAILED")) == ["requeuehold", "release", "start_now"]
    assert would_run(advice(exclude_nodes=["node2"]), obs(state="RUNNING")) == [
        "requeuehold", "exclude", "release", "start_now"]
    assert would_run(advice(), obs(state="PENDING", restarts=1, held=True)) == ["release", "start_now"]
    assert would_run(advice(), obs(state="COMPLETED")) == []
    assert would_run(advice(operation="terminate"), obs(state="RUNNING")) == ["cancel"]


def test_a_step_plan_carries_the_command_it_runs_and_the_audit_text_that_records_it():
    p = plan(advice(exclude_nodes=["node2"]), obs(state="PENDING", restarts=1, held=True, excluded=("node1",)), NOW, 1)
    assert p.argv == ("scontrol", "update", "JobId=7", "ExcNodeList=node1,node2")
    assert p.audit == "scontrol update JobId=7 ExcNodeList=node1,node2"
    assert plan(advice(), obs(state="FAILED", restarts=0), NOW, 1).argv == ("scontrol", "requeuehold", "7")
    assert plan(advice(), obs(state="RUNNING", restarts=1), NOW, 1).argv == ()  # converged: no command


def test_observe_mode_records_every_command_act_mode_would_run():
    from relaunch.actuator.domain.reconciling import observe_only

    records, detail = observe_only(advice(), obs(state="FAILED", restarts=0))
    assert [(r.action, r.key) for r in records] == [("would requeuehold", "1"), ("would release", "2"),
                                                    ("would start_now", "3")]
    assert records[0].detail == "observe mode, step 1 of 3: scontrol requeuehold 7"
    assert detail == "would have run: requeuehold, release, start_now (RELAUNCH_ACTUATOR_MODE=observe)"
