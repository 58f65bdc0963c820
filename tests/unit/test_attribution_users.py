"""One user cannot get a healthy node excluded for everyone (issue 35, item 3; docs/policy.md "Node history").

The attacks replayed through the pure decision (attribution, reputation, decide), as the decider runs
them: each decision's exclusions join the node history the next one reads, with their owner and
whether gpu-probe or Slurm stood behind them (handlers.Decider._judge_batch does the same)."""

from __future__ import annotations

import datetime as dt

from relaunch.common.schemas import AnomalyDetected, EvidenceLine
from relaunch.decider.domain.attribution import NodeEvent, attribute
from relaunch.decider.domain.policy import History, Policy, decide
from relaunch.decider.domain.reputation import Exclusion, standing

NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
NOBODY, ROOT, ALICE, BOB = 65534, 0, 1001, 1002
FAKE_XID = "Dec  4 11:59:30 {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus"


def xid_line(job: str, host: str, job_nodes: list[str]) -> AnomalyDetected:
    """What the detector sends for a job whose log printed an XID 79 line naming `host`: the culprits
    among the job's nodes, else all of them (detection._implicated)."""
    return AnomalyDetected(
        anomaly_id=f"c.{job}.0.crash", cluster="c", job_id=job, attempt=0, kind="crash", source="log",
        signature_id="gpu_xid", category="gpu_xid_hardware", fault_domain="hardware", action="restart_excluding",
        summary="the GPU reported a hardware fault", nodes=[host] if host in job_nodes else list(job_nodes),
        evidence=[EvidenceLine(path="/o", offset=0, text=FAKE_XID.format(host=host))], detected_at=NOW)


def segfault(job: str, job_nodes: list[str]) -> AnomalyDetected:
    return AnomalyDetected(
        anomaly_id=f"c.{job}.0.crash", cluster="c", job_id=job, attempt=0, kind="crash", source="log",
        signature_id="segfault", category="segfault", fault_domain="unknown", action="restart", summary="segfault",
        nodes=list(job_nodes), detected_at=NOW)


class Cluster:
    """The node history across decisions, as the ledger keeps it."""

    def __init__(self) -> None:
        self.history: dict[str, list[Exclusion]] = {}

    def fail(self, anomaly: AnomalyDetected, owner: int | None, job_nodes: list[str],
             events: list[NodeEvent] = (), at: dt.datetime = NOW):
        suspects = attribute(anomaly, job_nodes, list(events), at, node_history=self.history)
        decision = decide(History(), anomaly, Policy(), at, suspects)
        assert decision.kind == "restart", decision
        for node in decision.exclude_nodes:
            found = [s for s in suspects if s.node == node]
            self.history.setdefault(node, []).insert(0, Exclusion(anomaly.job_id, at, owner,
                                                                  any(s.corroborated for s in found)))
        return decision, suspects


def test_two_jobs_of_one_user_naming_node2_do_not_get_it_excluded_for_another_users_job():
    cluster = Cluster()
    for job in ("11", "12"):
        decision, _ = cluster.fail(xid_line(job, "node2", ["node1", "node2"]), NOBODY, ["node1", "node2"])
        assert decision.exclude_nodes == ("node2",)  # the job's own line on its own node: its own restart
    assert standing(cluster.history["node2"], NOW).weight == 1.0  # one user weighs once
    decision, suspects = cluster.fail(segfault("13", ["node2", "node3"]), ROOT, ["node2", "node3"])
    assert decision.exclude_nodes == () and suspects == ()
    # A third, fourth... job of the same user changes nothing.
    for job in ("14", "15", "16"):
        cluster.fail(xid_line(job, "node2", ["node1", "node2"]), NOBODY, ["node1", "node2"])
    assert cluster.fail(segfault("17", ["node2", "node3"]), ROOT, ["node2", "node3"])[0].exclude_nodes == ()


def test_an_xid_line_naming_a_node_the_job_did_not_run_on_excludes_neither():
    decision, suspects = Cluster().fail(xid_line("21", "node3", ["node1"]), ALICE, ["node1"])
    assert decision.exclude_nodes == ()
    assert [(s.node, s.confidence) for s in suspects] == [("node3", 0.0)]
    assert "the job did not run on it" in suspects[0].reasons[0]
    # Nor in a multi-node job.
    decision, suspects = Cluster().fail(xid_line("22", "node3", ["node1", "node2"]), ALICE, ["node1", "node2"])
    assert decision.exclude_nodes == () and [s.node for s in suspects] == ["node3"]


def test_a_job_s_own_xid_line_without_a_host_still_excludes_its_only_node():
    line = xid_line("23", "node1", ["node1"]).model_copy(update={"evidence": [EvidenceLine(
        path="/o", offset=0, text="NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus")]})
    decision, suspects = Cluster().fail(line, ALICE, ["node1"])
    assert decision.exclude_nodes == ("node1",) and not suspects[0].corroborated


def test_two_different_users_xid_lines_on_node2_make_it_suspect_for_a_third_user():
    cluster = Cluster()
    cluster.fail(xid_line("31", "node2", ["node1", "node2"]), ALICE, ["node1", "node2"])
    cluster.fail(xid_line("32", "node2", ["node2", "node4"]), BOB, ["node2", "node4"], at=NOW)
    decision, suspects = cluster.fail(segfault("33", ["node2", "node3"]), ROOT, ["node2", "node3"])
    assert decision.exclude_nodes == ("node2",)
    assert suspects[0].reasons[0].startswith("excluded for 2 other jobs (32, 31): 2 different known user(s)")


def test_unknown_owners_are_one_user_and_never_an_independent_one():
    cluster = Cluster()
    for job in ("41", "42"):
        cluster.fail(xid_line(job, "node2", ["node1", "node2"]), None, ["node1", "node2"])
    assert cluster.fail(segfault("43", ["node2", "node3"]), ROOT, ["node2", "node3"])[0].exclude_nodes == ()
    # With one known user besides: still one known user.
    cluster.fail(xid_line("44", "node2", ["node1", "node2"]), ALICE, ["node1", "node2"])
    said = standing(cluster.history["node2"], NOW)
    assert said.weight >= 1.5 and said.users == 1 and not said.suspect
    decision, suspects = cluster.fail(segfault("45", ["node2", "node3"]), ROOT, ["node2", "node3"])
    assert decision.exclude_nodes == ()
    (hint,) = suspects  # shown, with why it is not used
    assert hint.node == "node2" and hint.confidence == 0.0 and "one user's word is not enough" in hint.reasons[0]


def test_a_gpu_probe_reading_corroborates_and_then_one_user_s_failures_count_for_everyone():
    cluster = Cluster()
    probe = [NodeEvent("node2", "failed", ("GPU 3: XID 79 (GPU has fallen off the bus)",), NOW)]
    for job in ("51", "52"):
        decision, suspects = cluster.fail(xid_line(job, "node2", ["node1", "node2"]), NOBODY, ["node1", "node2"],
                                          probe)
        assert decision.exclude_nodes == ("node2",) and suspects[0].corroborated
    decision, suspects = cluster.fail(segfault("53", ["node2", "node3"]), ROOT, ["node2", "node3"])
    assert decision.exclude_nodes == ("node2",)
    assert "2 corroborated by gpu-probe or Slurm" in suspects[0].reasons[0]


def test_slurm_s_node_failure_corroborates_the_line_naming_the_node():
    found = AnomalyDetected(
        anomaly_id="c.61.0.crash", cluster="c", job_id="61", attempt=0, kind="crash", source="log",
        signature_id="slurm_node_lost", category="slurm_node_failure", fault_domain="infrastructure",
        action="restart_excluding", summary="Slurm lost a node of the job", nodes=["node2"],
        evidence=[EvidenceLine(path="/o", offset=0, text="srun: error: Node failure on node2")], detected_at=NOW)
    (plain,) = attribute(found, ["node1", "node2"], [], NOW)
    assert plain.node == "node2" and plain.excluded and not plain.corroborated  # the job's text alone
    (backed,) = attribute(found, ["node1", "node2"], [], NOW, slurm_state="NODE_FAIL")
    assert backed.node == "node2" and backed.excluded and backed.corroborated
    # A node failure line naming another node than the job's: a hint; Slurm's NODE_FAIL of a one-node
    # attempt names its node by itself.
    other = found.model_copy(update={"evidence": [EvidenceLine(path="/o", offset=0,
                                                               text="srun: error: Node failure on node3")]})
    assert [(s.node, s.excluded) for s in attribute(other, ["node1"], [], NOW)] == [("node3", False)]
    suspects = attribute(other, ["node1"], [], NOW, slurm_state="NODE_FAIL")
    assert [(s.node, s.excluded, s.corroborated) for s in suspects] == [("node1", True, True), ("node3", False, False)]


def test_a_hint_of_the_previous_attempt_implicates_nothing():
    events = [NodeEvent("node3", "degraded", ("thermal",), NOW)]
    suspects = attribute(segfault("71", ["node3"]), ["node3"], events, NOW,
                         previous={"node3": (0.0, ("a hint: ... names it",))})
    assert [(s.node, s.confidence) for s in suspects] == [("node3", 0.5)]
