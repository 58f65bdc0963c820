import datetime as dt

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.attribution import NodeEvent, attribute
from relaunch.decider.domain.policy import History, Policy, decide

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def anomaly(action="restart", nodes=(), category="segfault", domain="unknown"):
    return AnomalyDetected(anomaly_id="c.1.0.crash", cluster="c", job_id="1", attempt=0, kind="crash", source="log",
                           signature_id="x", category=category, fault_domain=domain, action=action, summary="s",
                           nodes=list(nodes), detected_at=NOW)


def test_a_failed_probe_reading_of_a_job_node_makes_it_a_suspect_and_it_is_excluded():
    events = [NodeEvent("node2", "failed", ("GPU 3: XID 79 (hardware: GPU has fallen off the bus)",),
                        NOW - dt.timedelta(seconds=20))]
    suspects = attribute(anomaly(), ["node1", "node2"], events, NOW)
    assert [(s.node, s.excluded) for s in suspects] == [("node2", True)]
    d = decide(History(), anomaly(), Policy(), NOW, suspects)
    assert d.exclude_nodes == ("node2",) and "XID 79" in d.reason


def test_evidence_outside_the_job_or_the_window_or_only_degraded_is_not_enough():
    events = [NodeEvent("node4", "failed", ("XID 79",), NOW),                                # not the job's
              NodeEvent("node2", "failed", ("XID 79",), NOW - dt.timedelta(hours=2)),          # too old
              NodeEvent("node1", "degraded", ("thermal throttling",), NOW)]                   # weak
    suspects = attribute(anomaly(), ["node1", "node2"], events, NOW)
    assert [s.node for s in suspects] == ["node1"] and not suspects[0].excluded
    assert decide(History(), anomaly(), Policy(), NOW, suspects).exclude_nodes == ()


def test_a_log_line_naming_one_node_of_several_is_a_suspect_but_not_all_nodes():
    named = anomaly(action="restart_excluding", nodes=["node2"], category="ecc_error", domain="hardware")
    assert [s.node for s in attribute(named, ["node1", "node2"], [], NOW)] == ["node2"]
    everyone = anomaly(action="restart_excluding", nodes=["node1", "node2"], category="ecc_error", domain="hardware")
    suspects = attribute(everyone, ["node1", "node2"], [], NOW)
    assert suspects == () and decide(History(), everyone, Policy(), NOW, suspects).exclude_nodes == ()
    single = anomaly(action="restart_excluding", nodes=["node3"], category="ecc_error", domain="hardware")
    assert [s.node for s in attribute(single, ["node3"], [], NOW)] == ["node3"]


def test_exclusions_are_capped():
    events = [NodeEvent(f"node{i}", "failed", ("XID 48",), NOW) for i in range(1, 5)]
    suspects = attribute(anomaly(), [f"node{i}" for i in range(1, 5)], events, NOW)
    assert len(decide(History(), anomaly(), Policy(max_exclude=2), NOW, suspects).exclude_nodes) == 2


def test_a_node_excluded_for_several_other_jobs_is_suspect_for_everyone():
    history = {"node3": ("101", "102"), "node1": ("103",)}
    suspects = attribute(anomaly(), ["node1", "node3"], [], NOW, node_history=history)
    assert [(s.node, s.excluded) for s in suspects] == [("node3", True)]
    assert "2 other jobs" in suspects[0].reasons[0] and "101, 102" in suspects[0].reasons[0]


def test_hosts_named_by_a_network_error_are_suspects_unless_they_are_the_whole_job():
    ib = anomaly(action="restart", nodes=["node4"], category="nccl_network_error", domain="hardware")
    suspects = attribute(ib, ["node3", "node4"], [], NOW)
    assert [(s.node, s.excluded) for s in suspects] == [("node4", True)]
    pair = anomaly(action="restart", nodes=["node3", "node4"], category="nccl_network_error", domain="hardware")
    assert attribute(pair, ["node3", "node4"], [], NOW) == ()
    assert [s.node for s in attribute(pair, ["node1", "node2", "node3", "node4"], [], NOW)] == ["node3", "node4"]
