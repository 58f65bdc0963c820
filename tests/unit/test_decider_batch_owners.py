"""A batch's decisions weigh the exclusions of the ones before them with their owner and corroboration
(handlers.Decider._judge_batch; docs/policy.md "Node history"): the same outcome as one at a time."""

from __future__ import annotations

import datetime as dt

from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import AnomalyDetected, EvidenceLine
from relaunch.decider.adapters.ledger import JobTx
from relaunch.decider.domain.history import AttemptRecord, History
from relaunch.decider.domain.reputation import Exclusion
from relaunch.decider.handlers import Decider

NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
ALICE, BOB, ROOT = 1001, 1002, 0
XID = "Dec  4 11:59:30 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus"


def anomaly(job: str, nodes: list[str], xid: bool) -> AnomalyDetected:
    extra = (dict(signature_id="gpu_xid", category="gpu_xid_hardware", fault_domain="hardware",
                  action="restart_excluding", evidence=[EvidenceLine(path="/o", offset=0, text=XID)])
             if xid else dict(signature_id="segfault", category="segfault", fault_domain="unknown", action="restart"))
    return AnomalyDetected(anomaly_id=f"c.{job}.0.crash", cluster="c", job_id=job, attempt=0, kind="crash",
                           source="log", summary="s", nodes=list(nodes), detected_at=NOW, **extra)


def item(job: str, nodes: list[str], owner: int | None, xid: bool, history: dict):
    tx = JobTx(None, "c", job, {"comment": "relaunch:max_attempts=4", "user_id": owner})
    tx.inserted = True
    found = anomaly(job, nodes, xid)
    return ((found, Delivery("s", 1, 1), None),
            (tx, History(attempts=(AttemptRecord(0, nodes=tuple(nodes)),)), None, [], history))


def judge(first_owner: int | None) -> tuple[str, ...]:
    """bob's job left node2 out on its own log line an hour ago; now a job of `first_owner` does the same,
    and root's job on node2, decided after it in the same batch, fails: what does root's restart leave out?"""
    read = {"node2": (Exclusion("9", NOW - dt.timedelta(hours=1), BOB),)}
    pending, reads = zip(item("10", ["node1", "node2"], first_owner, True, read),
                         item("11", ["node2", "node3"], ROOT, False, read), strict=True)
    judged = Decider(None, None)._judge_batch(list(pending), list(reads), NOW, {})
    (_, _, (_, first, _)), (_, _, (_, second, _)) = judged
    assert first.exclude_nodes == ("node2",)
    return second.exclude_nodes


def test_a_batch_counts_the_earlier_decision_s_owner():
    assert judge(ALICE) == ("node2",)  # bob and alice: two different users
    assert judge(BOB) == ()  # bob twice is one user
    assert judge(None) == ()  # an unknown owner is not independent
