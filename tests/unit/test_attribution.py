import datetime as dt

import pytest

from relaunch.common.schemas import AnomalyDetected, EvidenceLine
from relaunch.decider.domain.attribution import NodeEvent, attribute, ib_pairs
from relaunch.decider.domain.reputation import HALF_LIFE, Exclusion
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


def test_a_node_excluded_for_several_other_users_jobs_is_suspect_for_everyone():
    # Two different users' jobs left node3 out (reputation.py: users, not jobs, count).
    history = {"node3": (Exclusion("101", NOW - dt.timedelta(hours=1), 1001),
                         Exclusion("102", NOW - dt.timedelta(hours=23), 1002)),
               "node1": (Exclusion("103", NOW, 1003),)}
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


# --- history decays, consecutive attempts, InfiniBand pairs ---------------------------------------------

def test_node_history_decays_with_its_half_life():
    # Two exclusions a day apart still weigh 1.68 (>= 1.5); the same two a week on weigh 0.16.
    recent = {"node3": (Exclusion("101", NOW - dt.timedelta(hours=24), 1001),
                        Exclusion("102", NOW - dt.timedelta(hours=2), 1002))}
    assert [s.node for s in attribute(anomaly(), ["node1", "node3"], [], NOW, node_history=recent)] == ["node3"]
    later = NOW + dt.timedelta(days=7)
    assert attribute(anomaly(), ["node1", "node3"], [], later, node_history=recent) == ()
    # A shorter half-life (the decider's setting) forgets sooner.
    assert attribute(anomaly(), ["node1", "node3"], [], NOW, node_history=recent,
                     half_life=dt.timedelta(hours=6)) == ()
    assert HALF_LIFE == dt.timedelta(hours=48)
    # The same job twice is one job.
    twice = {"node3": (Exclusion("101", NOW, 1001, True), Exclusion("101", NOW - dt.timedelta(hours=1), 1001, True))}
    assert attribute(anomaly(), ["node1", "node3"], [], NOW, node_history=twice) == ()


CONSECUTIVE = [
    # (what, evidence now, previous attempt's suspects, expected (node, confidence, excluded))
    ("degraded twice is excluded", [NodeEvent("node2", "degraded", ("thermal",), NOW)],
     {"node2": (0.5, ("gpu-probe: degraded",))}, [("node2", 0.7, True)]),
    ("failed twice stays below certainty", [NodeEvent("node2", "failed", ("XID 79",), NOW)],
     {"node2": (0.9, ("gpu-probe: failed",))}, [("node2", 0.95, True)]),
    ("a previous suspect without evidence now is not one", [],
     {"node2": (0.8, ("named",))}, []),
    ("another node implicated before changes nothing", [NodeEvent("node2", "degraded", ("thermal",), NOW)],
     {"node1": (0.8, ("named",))}, [("node2", 0.5, False)]),
]


@pytest.mark.parametrize("what, events, previous, expected", CONSECUTIVE, ids=[c[0] for c in CONSECUTIVE])
def test_the_same_node_in_consecutive_attempts_raises_confidence(what, events, previous, expected):
    suspects = attribute(anomaly(), ["node1", "node2"], events, NOW, previous=previous)
    assert [(s.node, s.confidence, s.excluded) for s in suspects] == expected
    for s in suspects:
        assert any("previous attempt" in r for r in s.reasons) == (s.node in previous)


def ib(line, nodes):
    return AnomalyDetected(anomaly_id="c.1.0.crash", cluster="c", job_id="1", attempt=0, kind="crash", source="log",
                           signature_id="nccl_ib_error", category="nccl_network_error", fault_domain="hardware",
                           action="restart", summary="s", nodes=list(nodes), detected_at=NOW,
                           evidence=[EvidenceLine(path="/l", offset=0, text=line)])


PAIR = "node1:1:2 [0] NCCL WARN NET/IB : Got completion from peer node2<54331> with error 12, opcode 0 (Recv)"
FOUR = ["node1", "node2", "node3", "node4"]
IB_PAIR = [
    # (what, line, anomaly nodes, job nodes, ib_pair, events, expected (node, confidence))
    ("both ends", PAIR, ["node1", "node2"], FOUR, "both", [], [("node1", 0.7), ("node2", 0.7)]),
    ("one: the peer by default", PAIR, ["node1", "node2"], FOUR, "one", [], [("node2", 0.7), ("node1", 0.4)]),
    ("one: the end with other evidence", PAIR, ["node1", "node2"], FOUR, "one",
     [NodeEvent("node1", "degraded", ("thermal",), NOW)], [("node1", 0.7), ("node2", 0.4)]),
    ("one: other evidence on the peer", PAIR, ["node1", "node2"], FOUR, "one",
     [NodeEvent("node2", "degraded", ("thermal",), NOW)], [("node2", 0.7), ("node1", 0.4)]),
    ("both ends of a two-node job are the whole job", PAIR, ["node1", "node2"], ["node1", "node2"], "both", [], []),
    ("one end of a two-node job is not", PAIR, ["node1", "node2"], ["node1", "node2"], "one", [],
     [("node2", 0.7), ("node1", 0.4)]),
    ("a domain name maps to the job's node", PAIR.replace("peer node2<", "peer node2.ib.cluster<"), ["node1"],
     FOUR, "one", [], [("node2", 0.7), ("node1", 0.4)]),
    ("an IP address peer: only the local host is named", PAIR.replace("peer node2<", "peer 10.0.0.2<"), ["node1"],
     FOUR, "one", [], [("node1", 0.7)]),
    ("no local host: the peer alone", "NCCL WARN NET/IB : Got completion from peer node2<1> with error 12",
     ["node2"], FOUR, "one", [], [("node2", 0.7)]),
    ("a peer that is not the job's is only a hint", PAIR.replace("peer node2<", "peer node9<"), ["node1"], FOUR,
     "one", [], [("node1", 0.7), ("node9", 0.0)]),
]


@pytest.mark.parametrize("what, line, nodes, job, mode, events, expected", IB_PAIR, ids=[c[0] for c in IB_PAIR])
def test_an_infiniband_pair_is_blamed_as_the_policy_says(what, line, nodes, job, mode, events, expected):
    suspects = attribute(ib(line, nodes), job, events, NOW, ib_pair=mode)
    assert [(s.node, s.confidence) for s in suspects] == expected


def test_ib_pairs_finds_local_and_peer():
    assert ib_pairs([PAIR, PAIR, "unrelated"], FOUR) == [("node1", "node2")]
    assert ib_pairs([PAIR], ["node2"]) == [(None, "node2")]


def test_ib_pair_must_be_known():
    with pytest.raises(ValueError, match="ib_pair"):
        attribute(anomaly(), ["node1"], [], NOW, ib_pair="neither")
    with pytest.raises(ValueError, match="ib_pair"):
        Policy(ib_pair="neither")


def test_with_ib_pair_one_a_restart_leaves_out_one_end_only():
    found = ib(PAIR, ["node1", "node2"])
    for mode, left_out in (("both", ("node1", "node2")), ("one", ("node2",))):
        suspects = attribute(found, FOUR, [], NOW, ib_pair=mode)
        assert decide(History(), found, Policy(ib_pair=mode), NOW, suspects).exclude_nodes == left_out


def test_the_stragglers_node_is_a_suspect():
    slow = AnomalyDetected(anomaly_id="c.1.0.straggler", cluster="c", job_id="1", attempt=0, kind="straggler",
                           source="progress", signature_id="straggler_throughput", category="straggler",
                           fault_domain="unknown", action="restart_excluding", summary="rank 5 at 40% of baseline",
                           nodes=["node2"], detected_at=NOW)
    (suspect,) = attribute(slow, ["node1", "node2"], [], NOW)
    assert (suspect.node, suspect.confidence) == ("node2", 0.8) and "slow rank" in suspect.reasons[0]
