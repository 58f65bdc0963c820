"""The decider with hang evidence against a real Postgres (docs/architecture.md, "Hang evidence"): a hang
waits for its evidence and then leaves the node it blames out of the restart; the same place in the
user's code on two attempts cancels the job (rule hang_deadlock); no evidence within the wait: decided as
without it; every rank in the same place: no node left out."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from relaunch.common.errors import TemporaryError
from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import AnomalyDetected, HangEvidence, JobObserved
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
DELIVERY = Delivery("s", 1, 1)
WAIT = dt.timedelta(seconds=30)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def observed(cluster, restarts=0):
    return JobObserved(cluster=cluster, job_id="5", name="train", state="RUNNING", restarts=restarts,
                       nodes=["node1", "node2"], comment="relaunch:max_attempts=4", partition="gpu", observed_at=now())


def hang(cluster, attempt=0, detected_at=None):
    return AnomalyDetected(anomaly_id=f"{cluster}.5.{attempt}.hang", cluster=cluster, job_id="5", attempt=attempt,
                           kind="hang", source="progress", signature_id="hang_no_progress", category="hang",
                           fault_domain="unknown", action="restart", summary="no progress",
                           detected_at=detected_at or now())


def evidence(cluster, attempt, blame, nodes=(), place=None):
    return HangEvidence(anomaly_id=f"{cluster}.5.{attempt}.hang", cluster=cluster, job_id="5", attempt=attempt,
                        status="collected", blame=blame, suspects=[1] if blame != "none" else [],
                        suspect_nodes=list(nodes), place=place, reason=f"rank 1 on node2 ({blame})",
                        collected_at=now())


async def advice(ledger, cluster):
    return await ledger.pool.fetch("SELECT * FROM advice WHERE cluster=$1 ORDER BY generation", cluster)


async def test_a_hang_waits_for_its_evidence_and_leaves_the_blamed_node_out(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger), hang_evidence_wait=WAIT)
    await decider.on_job(observed(cluster), DELIVERY)
    with pytest.raises(TemporaryError, match="hang evidence"):
        await decider.on_anomaly(hang(cluster), DELIVERY)
    assert await advice(ledger, cluster) == []
    await decider.on_hang_evidence(evidence(cluster, 0, "node", ["node2"]), DELIVERY)
    await decider.on_anomaly(hang(cluster), DELIVERY)
    (row,) = await advice(ledger, cluster)
    assert row["operation"] == "restart" and list(row["exclude_nodes"]) == ["node2"]
    assert any("hang evidence: rank 1 on node2" in ref for ref in json.loads(row["evidence_refs"]))


async def test_no_evidence_within_the_wait_is_decided_as_without_it(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger), hang_evidence_wait=WAIT)
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_anomaly(hang(cluster, detected_at=now() - WAIT), DELIVERY)
    (row,) = await advice(ledger, cluster)
    assert row["operation"] == "restart" and list(row["exclude_nodes"]) == []


async def test_the_same_place_in_the_users_code_twice_cancels_the_job(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger), hang_evidence_wait=WAIT)
    place = "scripts/faults.py:46 (at_step)"
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_hang_evidence(evidence(cluster, 0, "user_code", place=place), DELIVERY)
    await decider.on_anomaly(hang(cluster), DELIVERY)
    await decider.on_job(observed(cluster, restarts=1), DELIVERY)
    await decider.on_hang_evidence(evidence(cluster, 1, "user_code", place=place), DELIVERY)
    await decider.on_anomaly(hang(cluster, attempt=1), DELIVERY)
    first, second = await advice(ledger, cluster)
    assert first["operation"] == "restart" and list(first["exclude_nodes"]) == []
    assert second["operation"] == "terminate" and "same place in two attempts" in second["reason"]


async def test_every_rank_in_the_same_place_leaves_no_node_out(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger), hang_evidence_wait=WAIT)
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_hang_evidence(evidence(cluster, 0, "none"), DELIVERY)
    await decider.on_anomaly(hang(cluster), DELIVERY)
    (row,) = await advice(ledger, cluster)
    assert row["operation"] == "restart" and list(row["exclude_nodes"]) == []
