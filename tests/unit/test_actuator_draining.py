"""Optional node drain: which nodes, with what reason, idempotent; its place in plan(); argv checks."""

import datetime as dt

import pytest

from relaunch.actuator.adapters.slurm import Slurm
from relaunch.actuator.domain.draining import MAX_DRAINS_PER_ADVICE, MAX_REASON, Drain, hardware_evidence, plan_drains
from relaunch.actuator.domain.observing import NodeCondition, Observed
from relaunch.actuator.domain.reconciling import plan
from relaunch.common.errors import PermanentError
from relaunch.common.schemas import Advice

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
PROBE_FAILED = "node:node2:0.9:gpu-probe: failed at 11:59:58: XID 79 (GPU has fallen off the bus)"
LOG_HARDWARE = "node:node3:0.8:xid (hardware) in the job's log names it"
HISTORY = "node:node4:0.8:excluded for 2 other jobs in the last 24 h (11, 12)"
DEGRADED = "node:node1:0.5:gpu-probe: degraded at 11:59:00: temperature 91 C"


def advice(refs, exclude=("node2", "node3", "node4"), **kw) -> Advice:
    base = dict(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                exclude_nodes=list(exclude), evidence_refs=["anomaly:c.7.0.xid", *refs],
                issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=30))
    return Advice(**{**base, **kw})


def idle(*nodes) -> dict[str, NodeCondition]:
    return {n: NodeCondition(n, "idle", "") for n in nodes}


def test_only_excluded_nodes_with_hardware_evidence_qualify():
    a = advice([PROBE_FAILED, LOG_HARDWARE, HISTORY, DEGRADED])
    assert sorted(hardware_evidence(a)) == ["node2"]


def test_a_jobs_own_xid_line_never_drains_a_node_for_everyone():
    """Any user can print an XID line (issue 35): it excludes the node from that job's restart only."""
    assert plan_drains(advice([LOG_HARDWARE], exclude=("node3",)), idle("node3")) == []


def test_evidence_on_a_node_the_advice_does_not_exclude_is_ignored():
    assert hardware_evidence(advice([PROBE_FAILED], exclude=("node3",))) == {}


def test_drain_reason_names_relaunch_the_job_and_the_evidence():
    (d,) = plan_drains(advice([PROBE_FAILED]), idle("node2"))
    assert d.node == "node2"
    assert d.reason.startswith("relaunch: job 7 attempt 0: gpu-probe: failed at 11:59:58: XID 79")


def test_reason_is_bounded_and_plain_whatever_the_evidence_says():
    nasty = "node:node2:0.9:gpu-probe: failed at 11:59:58: $(rm -rf /); `x` \"q\" 'y'\n" + "z" * 500
    (d,) = plan_drains(advice([nasty]), idle("node2"))
    assert len(d.reason) <= MAX_REASON
    assert not set(d.reason) & set("$`\"'\n;&|<>") - {";"}
    Slurm.drain_argv(d.node, d.reason)  # the adapter's own check accepts what the plan makes


def test_a_node_drained_or_draining_by_anyone_is_left_alone():
    conditions = {"node2": NodeCondition("node2", "drained", "relaunch: job 7 attempt 0: ..."),
                  "node3": NodeCondition("node3", "draining", "operator: bad fan")}
    assert plan_drains(advice([PROBE_FAILED, LOG_HARDWARE]), conditions) == []


def test_a_node_slurm_does_not_list_is_not_drained():
    assert plan_drains(advice([PROBE_FAILED]), {}) == []


def test_drains_per_advice_are_bounded():
    refs = [f"node:n{i}:0.9:gpu-probe: failed at 11:00:00: xid" for i in range(5)]
    drains = plan_drains(advice(refs, exclude=[f"n{i}" for i in range(5)]), idle(*[f"n{i}" for i in range(5)]))
    assert len(drains) == MAX_DRAINS_PER_ADVICE


def test_plan_drains_first_then_restarts():
    a = advice([PROBE_FAILED])
    drain = Drain("node2", "relaunch: job 7 attempt 0: gpu-probe: failed")
    failed = Observed(exists=True, state="FAILED", restarts=0)
    p = plan(a, failed, NOW, 1, drains=(drain,))
    assert (p.kind, p.step, p.drain) == ("step", "drain", drain)
    assert plan(a, failed, NOW, 1, drains=()).step == "requeuehold"


@pytest.mark.parametrize("observed, newest, now", [
    (Observed(exists=True, state="FAILED", restarts=0), 2, NOW),             # superseded
    (Observed(exists=True, state="FAILED", restarts=0), 1, NOW + dt.timedelta(hours=1)),  # expired
    (Observed(exists=False), 1, NOW),                                        # job gone
])
def test_no_drain_once_the_advice_is_over(observed, newest, now):
    p = plan(advice([PROBE_FAILED]), observed, now, newest, drains=(Drain("node2", "relaunch: x"),))
    assert p.kind == "abandoned"


def test_no_drain_outside_the_partition_allowlist():
    observed = Observed(exists=True, state="FAILED", restarts=0, partition="other")
    p = plan(advice([PROBE_FAILED]), observed, NOW, 1, frozenset({"debug"}), drains=(Drain("node2", "relaunch: x"),))
    assert p.kind == "abandoned"


def test_drain_argv_is_a_list_with_checked_values():
    assert Slurm.drain_argv("node2", "relaunch: job 7") == [
        "scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=relaunch: job 7"]
    for node, reason in [("node2 State=DOWN", "relaunch"), ("-n", "relaunch"), ("node2", "x\ny"), ("node2", "")]:
        with pytest.raises(PermanentError):
            Slurm.drain_argv(node, reason)
