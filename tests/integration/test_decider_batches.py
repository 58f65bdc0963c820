"""The decider's set-based decisions against a real Postgres (docs/architecture.md, "Scale"): anomalies of
different jobs that arrive together are decided in one transaction, with the same outcome as one at a
time; one that must wait leaves nothing behind and the rest are decided; a bad one fails alone."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from relaunch.common.errors import TemporaryError
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow as now
from relaunch.common.schemas import AnomalyDetected, EvidenceLine, JobObserved, NodeHealth
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
DELIVERY = Delivery("s", 1, 1)
IB_LINE = ("transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer node2<54331> with error 12, "
           "opcode 0, len 0, vendor err 129 (Recv)")


def observed(cluster, job, nodes=("node1", "node2"), comment="relaunch:max_attempts=4"):
    return JobObserved(cluster=cluster, job_id=job, name="train", state="RUNNING", restarts=0, nodes=list(nodes),
                       comment=comment, partition="gpu", observed_at=now())


def anomaly(cluster, job, name, **kw):
    base = dict(anomaly_id=f"{cluster}.{job}.0.{name}", cluster=cluster, job_id=job, attempt=0, kind="crash",
                source="log", signature_id="ecc_error", category="ecc_error", fault_domain="hardware",
                action="restart", summary=name, detected_at=now(), last_step=100 + int(job))
    return AnomalyDetected(**{**base, **kw})


async def world(decider: Decider, cluster: str) -> list[AnomalyDetected]:
    """Jobs of every kind of outcome, observed, and the anomalies about them (in the order they arrive)."""
    for job in ("1", "2", "3", "5", "6"):
        await decider.on_job(observed(cluster, job), DELIVERY)
    await decider.on_job(observed(cluster, "4", nodes=()), DELIVERY)  # its nodes not known yet
    await decider.on_node(NodeHealth(cluster=cluster, node="node2", verdict="failed", reasons=["XID 79 on node2"],
                                     backend="fake", at=now()), DELIVERY)
    seen = anomaly(cluster, "3", "crash")
    await decider._on_anomaly(seen, DELIVERY)  # decided before: its redelivery adds nothing
    return [
        anomaly(cluster, "1", "crash"),                                      # restart, node2 left out (XID)
        anomaly(cluster, "2", "app", signature_id="python_application_error", category="python_application_error",
                fault_domain="application", action="stop"),                   # stopped: the code's fault
        seen,
        anomaly(cluster, "4", "ib", signature_id="nccl_ib_completion_error", category="nccl_network_error",
                fault_domain="infrastructure", evidence=[EvidenceLine(path="/x.out", offset=0, text=IB_LINE)]),
        anomaly(cluster, "5", "crash", fault_domain="unknown"),
        anomaly(cluster, "5", "hang", kind="hang", source="progress", signature_id="hang", category="hang",
                fault_domain="unknown"),                                      # joins job 5's Advice
        anomaly(cluster, "6", "oom", signature_id="cuda_oom", category="cuda_oom", fault_domain="application",
                action="stop"),
        anomaly(cluster, "7", "crash"),                                       # a job never observed: waits
    ]


async def ledger_of(ledger, cluster) -> dict:
    """The ledger's rows about `cluster`, with its name and times of day taken out, for comparing two clusters."""
    def rows(records, *columns):
        return sorted(tuple(re.sub(r"\d\d:\d\d:\d\d", "T", json.dumps(r[c], default=str).replace(cluster, "C"))
                            for c in columns) for r in records)
    q = ledger.pool.fetch
    return {
        "jobs": rows(await q("SELECT * FROM jobs WHERE cluster=$1", cluster), "job_id", "verdict", "verdict_reason"),
        "attempts": rows(await q("SELECT * FROM attempts WHERE cluster=$1", cluster), "job_id", "idx", "high_step",
                         "nodes"),
        "anomalies": rows(await q("SELECT * FROM anomalies WHERE cluster=$1", cluster), "anomaly_id"),
        "advice": rows(await q("SELECT * FROM advice WHERE cluster=$1", cluster), "job_id", "generation",
                       "operation", "exclude_nodes", "reason", "evidence_refs", "fault_class"),
        "suspects": rows(await q("SELECT * FROM suspects WHERE cluster=$1", cluster), "job_id", "node", "confidence",
                         "excluded", "reasons"),
        "audit": rows(await q("SELECT * FROM audit WHERE cluster=$1", cluster), "job_id", "action", "detail"),
        "outbox": rows(await q("SELECT * FROM outbox WHERE subject LIKE $1", f"%.{cluster}.%"), "subject", "msg_id"),
    }


async def test_a_batch_is_decided_in_one_transaction_as_one_at_a_time_would(ledger, unique, monkeypatch):
    together, alone = f"b{unique}", f"a{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    batches, singles = [], []
    anomaly_batch, anomaly_tx = ledger.anomaly_batch, ledger.anomaly_tx
    monkeypatch.setattr(ledger, "anomaly_batch", lambda anomalies, *a: batches.append(
        [x.job_id for x in anomalies]) or anomaly_batch(anomalies, *a))

    # One at a time, the way the decider decided before batches: every anomaly alone, in order.
    expected = {}
    for a in await world(decider, alone):
        try:
            expected[a.job_id + a.anomaly_id.rsplit('.', 1)[1]] = await decider._on_anomaly(a, DELIVERY) is not None
        except TemporaryError as exc:
            expected[a.job_id + a.anomaly_id.rsplit('.', 1)[1]] = str(exc)

    # Together: as FastStream hands a fetch's messages to the handler, all at once.
    arrived = await world(decider, together)
    monkeypatch.setattr(ledger, "anomaly_tx", lambda *a: singles.append(a) or anomaly_tx(*a))
    outcomes = await asyncio.gather(*(decider.on_anomaly(a, DELIVERY) for a in arrived), return_exceptions=True)
    got = {}
    for a, outcome in zip(arrived, outcomes, strict=True):
        got[a.job_id + a.anomaly_id.rsplit('.', 1)[1]] = str(outcome) if isinstance(outcome, Exception) else None
    assert got == {k: (v if isinstance(v, str) else None) for k, v in expected.items()}
    assert got["4ib"] == "the attempt's nodes are not in the ledger yet"
    assert got["7crash"] == "job not observed yet; its policy is unknown"

    mine, theirs = await ledger_of(ledger, together), await ledger_of(ledger, alone)
    for table in mine:
        for row in set(mine[table]) ^ set(theirs[table]):
            print(table, "batch" if row in mine[table] else "alone", row)
    assert mine == theirs
    advice = {r["job_id"]: r for r in await ledger.pool.fetch("SELECT * FROM advice WHERE cluster=$1", together)}
    assert sorted(advice) == ["1", "3", "5"] and advice["1"]["exclude_nodes"] == ["node2"]  # 3: before the batch
    assert await ledger.pool.fetchval("SELECT count(*) FROM jobs WHERE cluster=$1 AND job_id='7'", together) == 0
    # One transaction for the batch, begun again once without the two that wait; job 5's second anomaly
    # in the next (it must see the first's Advice to join it); nothing decided alone.
    assert batches == [["1", "2", "3", "4", "5", "6", "7"], ["1", "2", "3", "5", "6"], ["5"]], batches
    assert singles == []


async def test_a_bad_anomaly_fails_alone_and_the_rest_of_its_batch_is_decided(ledger, unique):
    """A message whose data Postgres refuses (a NUL in a text) fails the batch's statement; each of its
    anomalies is then decided alone, so the bad one alone gets the error (the outcome module dead-letters it)."""
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    for job in ("1", "2", "3"):
        await decider.on_job(observed(cluster, job), DELIVERY)
    arrived = [anomaly(cluster, "1", "crash"), anomaly(cluster, "2", "crash", summary="bad \x00 byte"),
               anomaly(cluster, "3", "crash")]
    outcomes = await asyncio.gather(*(decider.on_anomaly(a, DELIVERY) for a in arrived), return_exceptions=True)
    assert outcomes[0] is None and outcomes[2] is None, outcomes
    assert isinstance(outcomes[1], Exception) and not isinstance(outcomes[1], TemporaryError), outcomes[1]
    jobs = [r["job_id"] for r in await ledger.pool.fetch(
        "SELECT job_id FROM advice WHERE cluster=$1 ORDER BY job_id", cluster)]
    assert jobs == ["1", "3"]


async def test_the_ledgers_connections_run_without_jit(ledger):
    """Postgres' JIT compiled a batch's read in each of its first five plans on a connection (1.3-2.1 s
    each, for a statement that runs in 15 ms): the ledger's pool turns it off on every connection."""
    async with ledger.pool.acquire() as a, ledger.pool.acquire() as b:
        assert [await c.fetchval("SHOW jit") for c in (a, b)] == ["off", "off"]
