"""The unschedulable guard: plan_exclusions() as a table, then through decide() with a History that
knows the partition's usable node count (JobObserved.partition_nodes, kept in the ledger)."""

import datetime as dt

import pytest

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.attribution import Suspect
from relaunch.decider.domain.exclusions import plan_exclusions
from relaunch.decider.domain.history import AttemptRecord, History, RestartRecord
from relaunch.decider.domain.policy import Policy, decide

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
S3 = [("n1", 0.9), ("n2", 0.8), ("n3", 0.7)]

TABLE = [
    # (what, candidates, cap, job size, partition nodes, excluded before, kept, capped, unschedulable)
    ("partition unknown: the cap alone", S3, 2, 4, None, (), ("n1", "n2"), ("n3",), ()),
    ("room for all", S3, 3, 4, 8, (), ("n1", "n2", "n3"), (), ()),
    ("room for one: the most confident stays out", S3, 3, 4, 5, (), ("n1",), (), ("n3", "n2")),
    ("exactly enough", S3, 3, 4, 7, (), ("n1", "n2", "n3"), (), ()),
    ("no room", S3, 3, 4, 4, (), (), (), ("n3", "n2", "n1")),
    ("already too small: nothing more left out", S3, 3, 4, 3, (), (), (), ("n3", "n2", "n1")),
    ("earlier exclusions use the room", S3, 3, 4, 6, ("n8", "n9"), (), (), ("n3", "n2", "n1")),
    ("earlier exclusions, some room left", S3, 3, 4, 7, ("n8", "n9"), ("n1",), (), ("n3", "n2")),
    ("a node already left out costs nothing", [("n8", 0.9), ("n2", 0.8)], 3, 4, 6, ("n8", "n9"), ("n8",), (),
     ("n2",)),
    ("cap first, then the guard", S3, 2, 4, 5, (), ("n1",), ("n3",), ("n2",)),
    ("the order is by confidence", [("n3", 0.7), ("n1", 0.95), ("n2", 0.8)], 3, 2, 3, (), ("n1",), (),
     ("n3", "n2")),
    ("unknown confidences: the given order", [("a", None), ("b", None)], 2, 2, 3, (), ("a",), (), ("b",)),
    ("cap 0", S3, 0, 4, 10, (), (), ("n1", "n2", "n3"), ()),
    ("nothing to leave out", [], 2, 4, 4, (), (), (), ()),
]


@pytest.mark.parametrize("what, candidates, cap, size, partition, before, kept, capped, dropped", TABLE,
                         ids=[row[0] for row in TABLE])
def test_plan_exclusions(what, candidates, cap, size, partition, before, kept, capped, dropped):
    plan = plan_exclusions(candidates, cap, size, partition, before, partition="gpu")
    assert (plan.kept, plan.capped, plan.unschedulable) == (kept, capped, dropped)
    for node in capped:
        assert node in plan.note and "max_exclude" in plan.note
    for node in dropped:
        assert node in plan.note and f"partition 'gpu' has {partition} usable node(s)" in plan.note
    assert bool(plan.note) == bool(capped or dropped)
    if partition is not None and size <= partition - len(set(before)):
        assert size <= partition - len(set(before) | set(plan.kept))


def test_negative_sizes_are_refused():
    with pytest.raises(ValueError):
        plan_exclusions(S3, 2, 4, -1)


def crash(attempt=0, nodes=(), action="restart"):
    return AnomalyDetected(anomaly_id=f"c.1.{attempt}.crash", cluster="c", job_id="1", attempt=attempt, kind="crash",
                           source="log", signature_id="ecc", category="ecc_error", fault_domain="hardware",
                           action=action, summary="s", nodes=list(nodes), detected_at=NOW)


def suspects(*items):
    return tuple(Suspect(n, c, (f"reason for {n}",)) for n, c in items)


JOB = ("node1", "node2", "node3", "node4")


def test_decide_keeps_the_job_schedulable_and_says_which_suspect_it_left_in():
    history = History(attempts=(AttemptRecord(0, nodes=JOB),), partition="gpu", partition_nodes=5)
    d = decide(history, crash(), Policy(max_exclude=4), NOW, suspects(("node2", 0.9), ("node3", 0.75)))
    assert d.kind == "restart" and d.exclude_nodes == ("node2",) and d.left_in == ("node3",)
    assert "left in node3 (0.75): partition 'gpu' has 5 usable node(s), the job needs 4" in d.reason
    assert "without node2: reason for node2" in d.reason and "without node3" not in d.reason


def test_decide_counts_the_exclusions_of_earlier_restarts():
    earlier = RestartRecord(0, 1, "hardware", NOW - dt.timedelta(hours=1), status="CONVERGED",
                            exclude_nodes=("node9",))
    history = History(attempts=(AttemptRecord(0, nodes=("node9",) + JOB[1:]), AttemptRecord(1, nodes=JOB)),
                      restarts=(earlier,), decided_attempts=frozenset({0}), last_generation=1, partition_nodes=5)
    d = decide(history, crash(1), Policy(max_exclude=4), NOW, suspects(("node2", 0.9)))
    assert d.exclude_nodes == () and d.left_in == ("node2",) and "1 already left out" in d.reason


def test_partition_unknown_keeps_the_cap_only():
    history = History(attempts=(AttemptRecord(0, nodes=JOB),))
    d = decide(history, crash(), Policy(max_exclude=2), NOW,
               suspects(("node1", 0.9), ("node2", 0.8), ("node3", 0.7)))
    assert d.exclude_nodes == ("node1", "node2") and d.left_in == ("node3",) and "max_exclude" in d.reason


def test_without_attribution_the_anomalys_nodes_are_guarded_too():
    history = History(attempts=(AttemptRecord(0, nodes=JOB),), partition_nodes=4)
    d = decide(history, crash(nodes=["node2"], action="restart_excluding"), Policy(), NOW)
    assert d.kind == "restart" and d.exclude_nodes == () and d.left_in == ("node2",)


def test_the_job_size_falls_back_to_the_anomalys_nodes():
    d = decide(History(partition_nodes=2), crash(nodes=["node1", "node2"], action="restart_excluding"),
               Policy(), NOW, suspects(("node1", 0.9)))
    assert d.exclude_nodes == () and "the job needs 2" in d.reason
