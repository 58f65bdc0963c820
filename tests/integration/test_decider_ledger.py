"""The decider against a real Postgres (fresh database per test): a second incident on an attempt with an
open Advice joins it (also when two replicas race), the partition guard, the same node in consecutive
attempts, and node history that decays (docs/policy.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import AnomalyDetected, JobObserved, NodeHealth, ReconcileStatus
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
DELIVERY = Delivery("s", 1, 1)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def observed(cluster, restarts=0, nodes=("node1", "node2", "node3", "node4"), comment="relaunch:max_attempts=4",
             **kw):
    return JobObserved(cluster=cluster, job_id="5", name="train", state="RUNNING", restarts=restarts,
                       nodes=list(nodes), comment=comment, partition="gpu", observed_at=now(), **kw)


def anomaly(cluster, name, attempt=0, **kw):
    base = dict(anomaly_id=f"{cluster}.5.{attempt}.{name}", cluster=cluster, job_id="5", attempt=attempt,
                kind="crash", source="log", signature_id="ecc_error", category="ecc_error", fault_domain="hardware",
                action="restart", summary=name, detected_at=now())
    return AnomalyDetected(**{**base, **kw})


async def audits(ledger, cluster, action):
    rows = await ledger.pool.fetch("SELECT detail FROM audit WHERE cluster=$1 AND action=$2 ORDER BY id",
                                   cluster, action)
    return [json.loads(r["detail"]) for r in rows]


async def advice_rows(ledger, cluster):
    return await ledger.pool.fetch("SELECT * FROM advice WHERE cluster=$1 ORDER BY generation", cluster)


async def test_a_second_incident_joins_the_open_advice_and_restarts_nothing(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, "crash"), DELIVERY)
    hang = anomaly(cluster, "hang", kind="hang", source="progress", signature_id="hang", category="hang",
                   fault_domain="unknown")
    for _ in range(2):  # a redelivery of the second incident adds nothing
        await decider.on_anomaly(hang, DELIVERY)
    (advice,) = await advice_rows(ledger, cluster)
    refs = json.loads(advice["evidence_refs"])
    assert advice["generation"] == 1 and advice["status"] == "PENDING"
    assert refs.count(f"anomaly:{cluster}.5.0.crash") == 1 and refs.count(f"anomaly:{cluster}.5.0.hang") == 1
    [join] = await audits(ledger, cluster, "join")
    assert join["rule"] == "joins_open_advice" and join["generation"] == 1 and join["anomaly"] == hang.anomaly_id
    assert "joined advice generation 1" in join["reason"]
    # One Advice published, not two (each decision's audit entry goes through the outbox too).
    assert await ledger.pool.fetchval("SELECT count(*) FROM outbox WHERE subject LIKE 'relaunch.advice.%'") == 1
    assert await ledger.pool.fetchval("SELECT count(*) FROM outbox WHERE subject LIKE 'relaunch.event.audit.%'") == 2

    # Once the actuator has carried it out, a late incident on that attempt joins nothing and restarts nothing.
    await decider.on_reconcile(ReconcileStatus(cluster=cluster, job_id="5", generation=1, status="CONVERGED",
                                               reason="done", at=now()), Delivery("s", 1, 9))
    await decider.on_anomaly(anomaly(cluster, "late"), DELIVERY)
    assert len(await advice_rows(ledger, cluster)) == 1 and len(await audits(ledger, cluster, "join")) == 1
    assert await ledger.pool.fetchval("SELECT count(*) FROM anomalies WHERE cluster=$1", cluster) == 3


async def test_two_replicas_racing_on_two_incidents_of_one_attempt_make_one_advice(ledger, unique):
    cluster = f"c{unique}"
    a, b = Decider(ledger, OutboxPublisher(None, ledger)), Decider(ledger, OutboxPublisher(None, ledger))
    await a.on_job(observed(cluster), DELIVERY)
    first, second = anomaly(cluster, "one"), anomaly(cluster, "two", category="nccl_network_error")
    await asyncio.gather(a.on_anomaly(first, DELIVERY), b.on_anomaly(second, DELIVERY),
                         b.on_anomaly(first, DELIVERY), a.on_anomaly(second, DELIVERY))
    (advice,) = await advice_rows(ledger, cluster)
    refs = json.loads(advice["evidence_refs"])
    assert {f"anomaly:{first.anomaly_id}", f"anomaly:{second.anomaly_id}"} <= set(refs)
    assert len(await audits(ledger, cluster, "restart")) == 1 and len(await audits(ledger, cluster, "join")) == 1


async def test_the_partition_guard_leaves_a_suspect_in_and_the_ledger_says_so(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, partition_nodes=5), DELIVERY)
    await decider.on_job(observed(cluster), DELIVERY)  # partition size unknown this time: the last one is kept
    assert await ledger.pool.fetchval("SELECT partition_nodes FROM jobs WHERE cluster=$1", cluster) == 5
    for node in ("node2", "node3"):
        await decider.on_node(NodeHealth(cluster=cluster, node=node, verdict="failed", reasons=[f"XID 79 on {node}"],
                                         backend="fake", at=now()), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, "crash"), DELIVERY)
    (advice,) = await advice_rows(ledger, cluster)
    assert advice["exclude_nodes"] == ["node2"]
    assert "left in node3 (0.90): partition 'gpu' has 5 usable node(s), the job needs 4" in advice["reason"]
    [restart] = await audits(ledger, cluster, "restart")
    assert restart["left_in"] == ["node3"]
    suspects = await ledger.pool.fetch("SELECT node, excluded FROM suspects WHERE cluster=$1 ORDER BY node", cluster)
    assert [(r["node"], r["excluded"]) for r in suspects] == [("node2", True), ("node3", False)]


async def test_the_same_node_in_consecutive_attempts_is_left_out(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_node(NodeHealth(cluster=cluster, node="node2", verdict="degraded", reasons=["thermal"],
                                     backend="fake", at=now()), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, "crash"), DELIVERY)
    (first,) = await advice_rows(ledger, cluster)
    assert first["exclude_nodes"] == []  # degraded alone (0.5) is not enough
    await decider.on_job(observed(cluster, restarts=1), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, "crash", attempt=1), DELIVERY)
    second = (await advice_rows(ledger, cluster))[1]
    assert second["exclude_nodes"] == ["node2"] and second["attempt"] == 1
    assert any("previous attempt too (0.50" in ref for ref in json.loads(second["evidence_refs"]))
    row = await ledger.pool.fetchrow("SELECT confidence FROM suspects WHERE cluster=$1 AND attempt=1", cluster)
    assert row["confidence"] == pytest.approx(0.7)


async def test_node_history_decays_so_an_old_exclusion_weighs_too_little(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    # 4 days ago weighs 0.25 with the 48 h half-life, 1 h ago 0.99: 1.24, under the 1.5 that makes a suspect
    # (two different users: their exclusions would count).
    for job, hours_ago in (("7", 96), ("8", 1)):
        async with ledger.job_tx(cluster, job) as tx:
            await tx.conn.execute("UPDATE jobs SET user_id=$3 WHERE cluster=$1 AND job_id=$2", cluster, job,
                                  1000 + int(job))
            await tx.conn.execute(
                "INSERT INTO advice (cluster, job_id, generation, attempt, operation, exclude_nodes, reason, "
                "issued_at, expires_at) VALUES ($1,$2,1,0,'restart',$3,'r',$4,$4)",
                cluster, job, ["node1"], now() - dt.timedelta(hours=hours_ago))
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, "crash", fault_domain="unknown"), DELIVERY)
    (advice,) = [r for r in await advice_rows(ledger, cluster) if r["job_id"] == "5"]
    assert advice["exclude_nodes"] == [] and "other jobs" not in advice["evidence_refs"]


IB_LINE = ("transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer node2<54331> with error 12, "
           "opcode 0, len 0, vendor err 129 (Recv)")


async def test_an_anomaly_that_comes_before_the_attempts_nodes_waits_for_them(ledger, unique):
    """The observation with the attempt's nodes and the anomaly travel on different consumers: an IB error
    read from the log before the RUNNING observation is in the ledger is redelivered, not attributed
    against no nodes (which would exclude none); once the nodes are known, the peer it names is left out."""
    from relaunch.common.errors import TemporaryError
    from relaunch.common.schemas import EvidenceLine
    from relaunch.decider.handlers import WAIT_FOR_NODES_DELIVERIES

    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, nodes=()), DELIVERY)
    line = anomaly(cluster, "ib", signature_id="nccl_ib_completion_error", category="nccl_network_error",
                   fault_domain="infrastructure", evidence=[EvidenceLine(path="/x.out", offset=0, text=IB_LINE)])
    with pytest.raises(TemporaryError, match="nodes are not in the ledger yet"):
        await decider.on_anomaly(line, DELIVERY)
    assert await ledger.pool.fetchval("SELECT count(*) FROM anomalies WHERE cluster=$1", cluster) == 0
    await decider.on_job(observed(cluster, nodes=("node1", "node2")), DELIVERY)
    await decider.on_anomaly(line, Delivery("s", 2, 1))
    (advice,) = await advice_rows(ledger, cluster)
    assert advice["exclude_nodes"] == ["node2"]

    # Bounded: when the nodes never come, the last wait decides with what is known (no exclusion).
    other = f"{cluster}x"
    await decider.on_job(observed(other, nodes=()), DELIVERY)
    late = line.model_copy(update={"cluster": other, "anomaly_id": f"{other}.5.0.ib"})
    await decider.on_anomaly(late, Delivery("s", WAIT_FOR_NODES_DELIVERIES, 1))
    (advice,) = await advice_rows(ledger, other)
    assert advice["exclude_nodes"] == [] and advice["operation"] == "restart"


async def test_a_decision_writes_its_audit_row_once_and_the_echo_of_it_is_not_written_again(ledger, unique):
    """The decider's audit consumer skips entries the decider wrote (same transaction as the outbox
    entry that sent them); other services' entries are recorded, once each."""
    from relaunch.common.schemas import AuditEntry

    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, "crash"), DELIVERY)
    [row] = await ledger.pool.fetch("SELECT * FROM audit WHERE cluster=$1 AND service='decider'", cluster)
    outbox = await ledger.pool.fetch("SELECT payload FROM outbox WHERE msg_id=$1", row["idempotency_key"])
    assert len(outbox) == 1  # the entry custom consumers hear of, exactly once
    echo = AuditEntry.model_validate_json(bytes(outbox[0]["payload"]))
    forged = echo.model_copy(update={"idempotency_key": f"{echo.idempotency_key}.other", "action": "stop"})
    await decider.on_audit(echo, DELIVERY)
    await decider.on_audit(forged, DELIVERY)  # a decider entry the ledger never wrote is not taken from the bus
    assert len(await ledger.pool.fetch("SELECT 1 FROM audit WHERE cluster=$1 AND service='decider'", cluster)) == 1
    actuator = AuditEntry(cluster=cluster, job_id="5", service="actuator", action="requeue", detail="{}",
                          idempotency_key=f"actuator.{cluster}.5.1", at=now())
    await decider.on_audit(actuator, DELIVERY)
    await decider.on_audit(actuator, DELIVERY)
    assert [r["action"] for r in await ledger.pool.fetch(
        "SELECT action FROM audit WHERE cluster=$1 AND service='actuator'", cluster)] == ["requeue"]


async def test_suspects_of_one_attribution_are_saved_in_one_statement_with_the_most_confident_kept(ledger, unique):
    """save_suspects: several nodes at once; a node named twice keeps its most confident finding; a
    later, less confident finding does not replace the stored one but can still mark it excluded."""
    from relaunch.decider.domain.attribution import Suspect

    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    at = now()
    async with ledger.job_tx(cluster, "5") as tx:
        await tx.save_suspects(0, [Suspect("node1", 0.4, ("a",)), Suspect("node2", 0.9, ("b",)),
                                   Suspect("node1", 0.7, ("c",))], ("node2",), "x1", at)
    async with ledger.job_tx(cluster, "5") as tx:
        await tx.save_suspects(0, [Suspect("node2", 0.5, ("d",)), Suspect("node1", 0.2, ("e",))], ("node1",),
                               "x2", at)
        history = await tx.history()
    assert history.suspects == ((0, "node1", pytest.approx(0.7), ("c",)), (0, "node2", pytest.approx(0.9), ("b",)))
    rows = await ledger.pool.fetch("SELECT node, excluded, anomaly_id FROM suspects WHERE cluster=$1 ORDER BY node",
                                   cluster)
    assert [(r["node"], r["excluded"], r["anomaly_id"]) for r in rows] == [("node1", True, "x1"), ("node2", True, "x1")]


async def test_the_writes_of_a_decision_go_together_and_none_of_them_when_it_fails(ledger, unique):
    """JobTx.together (docs/architecture.md, "Scale"): the writes made inside reach the ledger as one
    statement when the block ends; a block that raises writes nothing; the verdict written twice keeps
    the later one, as it would statement by statement."""
    from relaunch.decider.domain.attribution import Suspect

    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    at = now()

    async def verdict():
        return tuple(await ledger.pool.fetchrow("SELECT verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster))

    with pytest.raises(RuntimeError, match="between the writes"):
        async with ledger.job_tx(cluster, "5") as tx:
            async with tx.together():
                await tx.save_suspects(0, [Suspect("node1", 0.9, ("a",))], ("node1",), "x1", at)
                await tx.audit("report", {"attempt": 0}, f"decider.{cluster}.x1", at)
                raise RuntimeError("between the writes")
    assert await ledger.pool.fetchval("SELECT count(*) FROM suspects WHERE cluster=$1", cluster) == 0
    assert await ledger.pool.fetchval("SELECT count(*) FROM audit WHERE cluster=$1", cluster) == 0

    async with ledger.job_tx(cluster, "5") as tx:
        async with tx.together():
            await tx.save_suspects(0, [Suspect("node1", 0.9, ("a",))], ("node1",), "x1", at)
            await tx.set_verdict("stopped", "first")
            await tx.audit("report", {"attempt": 0}, f"decider.{cluster}.x1", at)
            await tx.set_verdict("observing", "second")
            # Nothing is in the ledger until the block ends (another connection cannot see it either).
            assert await tx.conn.fetchval("SELECT count(*) FROM suspects WHERE cluster=$1", cluster) == 0
        assert await tx.conn.fetchval("SELECT count(*) FROM suspects WHERE cluster=$1", cluster) == 1
    assert await verdict() == ("observing", "second")
    assert [r["action"] for r in await ledger.pool.fetch("SELECT action FROM audit WHERE cluster=$1", cluster)] == \
        ["report"]
    assert await ledger.pool.fetchval("SELECT count(*) FROM outbox WHERE msg_id=$1", f"decider.{cluster}.x1") == 1


async def test_an_observation_of_the_job_on_record_takes_no_transaction_of_its_own(ledger, unique, monkeypatch):
    """record_observation's usual case is one call (migration 0011); a job that reuses the id, and a
    comment whose options must be audited, still take the locked path (JobTx.same_job)."""
    from relaunch.common.optin import parse_comment
    from relaunch.common.policies.policy_file import load_policies
    from relaunch.common.policies.policy_set import resolve

    cluster = f"c{unique}"
    policy = resolve(parse_comment("relaunch:max_attempts=4"), load_policies())
    first = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.UTC)
    locked = []
    job_tx = ledger.job_tx

    def counting(*args):
        locked.append(args)
        return job_tx(*args)

    monkeypatch.setattr(ledger, "job_tx", counting)
    await ledger.record_observation(observed(cluster, submit_time=first), policy)  # a job never seen
    await ledger.record_observation(observed(cluster, submit_time=first + dt.timedelta(seconds=0.5), exit_code=3)
                                    .model_copy(update={"state": "FAILED"}), policy)
    assert locked == []
    row = await ledger.pool.fetchrow("SELECT state, submit_time FROM jobs WHERE cluster=$1 AND job_id='5'", cluster)
    attempt = await ledger.pool.fetchrow("SELECT state, exit_code, ended_at, nodes FROM attempts WHERE cluster=$1",
                                         cluster)
    assert (row["state"], row["submit_time"]) == ("FAILED", first)
    assert (attempt["state"], attempt["exit_code"], attempt["nodes"]) == ("FAILED", 3, ["node1", "node2", "node3",
                                                                                        "node4"])
    assert attempt["ended_at"] is not None

    # A report about an earlier job with this id: locked, dropped, nothing written.
    await ledger.record_observation(observed(cluster, submit_time=first - dt.timedelta(hours=1))
                                    .model_copy(update={"name": "old"}), policy)
    assert len(locked) == 1
    assert await ledger.pool.fetchval("SELECT name FROM jobs WHERE cluster=$1 AND job_id='5'", cluster) == "train"
    # A new job reusing the id: locked, the first retired, the new one written.
    await ledger.record_observation(observed(cluster, submit_time=first + dt.timedelta(hours=1))
                                    .model_copy(update={"name": "new"}), policy)
    assert len(locked) == 2
    names = {r["job_id"]: r["name"] for r in await ledger.pool.fetch("SELECT job_id, name FROM jobs WHERE cluster=$1",
                                                                     cluster)}
    assert names == {"5": "new", "5@20261201T100000Z": "train"}
    # Invalid options are audited, which takes the locked path too.
    bad = resolve(parse_comment("relaunch:max_attempts=many"), load_policies())
    assert bad.option_errors
    await ledger.record_observation(observed(cluster, submit_time=first + dt.timedelta(hours=1),
                                             comment="relaunch:max_attempts=many"), bad)
    assert len(locked) == 3
    assert await ledger.pool.fetchval("SELECT count(*) FROM audit WHERE cluster=$1 AND action='options_invalid'",
                                      cluster) == 1
