"""The API's adapters against real Postgres (a fresh database per test, migrated by the decider's
Ledger) and the test stack's NATS: the ledger queries, operator overrides, live events."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import asyncpg
import pytest

from relaunch.api.adapters.events import BusEvents
from relaunch.api.adapters.ledger_read import LedgerReader
from relaunch.api.adapters.overrides import OverrideStore
from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.schemas import AuditEntry
from relaunch.decider.adapters.ledger import Ledger

pytestmark = pytest.mark.integration
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def t(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
async def ledger(test_stack, unique):
    base = test_stack["RELAUNCH_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"CREATE DATABASE apitest_{unique}")
    ledger = await Ledger.connect(base.rsplit("/", 1)[0] + f"/apitest_{unique}")
    applied = await ledger.migrate()
    assert 4 in applied  # 0004_operator_overrides
    try:
        yield ledger
    finally:
        await ledger.close()
        await admin.execute(f"DROP DATABASE apitest_{unique}")
        await admin.close()


async def insert_timeline(pool, cluster: str) -> None:
    """Job 101 crashed on node1 (XID 79) and was restarted without it; 102 completed; 103 waits on
    a pending advice that also excludes node1. Written as the decider writes them (migrations 0001-0002)."""
    await pool.executemany(
        "INSERT INTO jobs (cluster, job_id, name, comment, state, restarts, verdict, verdict_reason, updated_at) "
        "VALUES ($1,$2,$3,'relaunch',$4,$5,$6,$7,$8)",
        [(cluster, "101", "train", "RUNNING", 1, "watching", "advice generation 1 converged", t(70)),
         (cluster, "102", "eval", "COMPLETED", 0, "watching", "", t(20)),
         (cluster, "103", "sweep", "PENDING", 0, "recovering", "restarting", t(50)),
         ("othercluster", "101", "elsewhere", "RUNNING", 0, "watching", "", t(5))])
    await pool.executemany(
        "INSERT INTO attempts (cluster, job_id, idx, state, nodes, exit_code, first_seen) "
        "VALUES ($1,$2,$3,$4,$5,$6,$7)",
        [(cluster, "101", 0, "FAILED", ["node1", "node2"], 1, t(1)),
         (cluster, "101", 1, "RUNNING", ["node2", "node3"], None, t(64)),
         (cluster, "102", 0, "COMPLETED", ["node4"], 0, t(2))])
    evidence = [{"path": "/jobs/train-101.out", "offset": 5120, "text": "NVRM: Xid 79, GPU has fallen off the bus."}]
    await pool.execute(
        """INSERT INTO anomalies (anomaly_id, cluster, job_id, attempt, kind, source, signature_id, category,
               fault_domain, action, summary, nodes, evidence, detected_at)
           VALUES ($1,$2,'101',0,'crash','log','xid-79','gpu_fell_off_bus','hardware','restart_excluding',
                   'GPU fell off the bus on node1',$3,$4,$5)""",
        f"{cluster}.101.0.crash", cluster, ["node1"], json.dumps(evidence), t(60))
    await pool.executemany(
        """INSERT INTO advice (cluster, job_id, generation, attempt, operation, exclude_nodes, reason, evidence_refs,
               policy, status, status_reason, issued_at, expires_at)
           VALUES ($1,$2,1,0,'restart',$3,$4,$5,'{}',$6,$7,$8,$9)""",
        [(cluster, "101", ["node1"], "restarting without node1",
          json.dumps([f"anomaly:{cluster}.101.0.crash", "node:node1:0.9:XID 79 on an allocated node"]),
          "CONVERGED", "desired state observed", t(60.2), t(1860)),
         (cluster, "103", ["node1"], "restarting without node1", "[]", "PENDING", "",
          dt.datetime.now(dt.UTC), dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))])
    await pool.executemany(
        "INSERT INTO reconcile_steps (cluster, job_id, generation, status, reason, step, at, dedupe_key) "
        "VALUES ($1,'101',1,$2,$3,$4,$5,$6)",
        [(cluster, "PENDING", "requeued in held state", "requeuehold", t(60.5), f"{cluster}.1"),
         (cluster, "PENDING", "excluded node1", "exclude", t(61), f"{cluster}.2"),
         (cluster, "CONVERGED", "desired state observed", "", t(62), f"{cluster}.3")])
    await pool.execute("INSERT INTO audit (cluster, job_id, service, action, detail, idempotency_key, at) "
                       "VALUES ($1,'101','decider','restart','{}',$2,$3)", cluster, f"{cluster}.a1", t(60.2))
    await pool.executemany(
        "INSERT INTO node_health (cluster, node, verdict, reasons, at) VALUES ($1,$2,$3,$4,$5)",
        [(cluster, "node1", "failed", json.dumps(["XID 79 on GPU 3"]), t(58)),
         (cluster, "node2", "healthy", "[]", t(58))])
    await pool.executemany(
        "INSERT INTO node_events (cluster, node, verdict, reasons, at) VALUES ($1,'node1',$2,$3,$4)",
        [(cluster, "failed", json.dumps(["XID 79 on GPU 3"]), t(58)),
         (cluster, "degraded", json.dumps(["ECC rising"]), t(30)),
         (cluster, "degraded", json.dumps(["ECC rising"]), t(10))])


async def test_jobs_filter_page_and_count(ledger, unique):
    cluster = f"c{unique}"
    await insert_timeline(ledger.pool, cluster)
    reader = LedgerReader(ledger.pool)
    jobs, total = await reader.jobs(cluster=cluster, limit=2)
    assert [j["job_id"] for j in jobs] == ["101", "103"] and total == 3  # newest activity first
    assert jobs[0]["attempt_count"] == 2 and jobs[0]["mode_override"] is None
    # each attempt's first anomaly, for the outcome sentence (relaunch.common.outcome_words)
    assert [(f["attempt"], f["category"]) for f in jobs[0]["failures"]] == [(0, "gpu_fell_off_bus")]
    assert jobs[0]["failures"][0]["evidence"][0]["text"].startswith("NVRM: Xid 79") and jobs[1]["failures"] == []
    jobs, total = await reader.jobs(cluster=cluster, limit=2, offset=2)
    assert [j["job_id"] for j in jobs] == ["102"] and total == 3
    jobs, total = await reader.jobs(states=["RUNNING"])
    assert {(j["cluster"], j["job_id"]) for j in jobs} == {(cluster, "101"), ("othercluster", "101")} and total == 2
    jobs, total = await reader.jobs(cluster=cluster, verdicts=["recovering", "stopped"])
    assert [j["job_id"] for j in jobs] == ["103"] and total == 1


async def test_a_job_detail_resolves_evidence_and_nests_reconcile_steps(ledger, unique):
    cluster = f"c{unique}"
    await insert_timeline(ledger.pool, cluster)
    detail = await LedgerReader(ledger.pool).job(cluster, "101")
    assert list(detail)[:5] == ["job", "attempts", "anomalies", "advice", "audit"]
    assert [a["index"] for a in detail["attempts"]] == [0, 1]
    assert detail["anomalies"][0]["evidence"][0]["offset"] == 5120  # jsonb decoded
    advice = detail["advice"][0]
    assert advice["evidence"]["anomalies"][0]["evidence"][0]["text"].startswith("NVRM: Xid 79")
    assert advice["excluded"] == ["node1"] and advice["exclusion_words"] == "restart without node1"
    assert advice["evidence"]["suspects"] == [{"node": "node1", "confidence": 0.9,
                                               "reasons": ["XID 79 on an allocated node"]}]
    assert [s["step"] for s in advice["reconcile"]] == ["requeuehold", "exclude", ""]
    assert dt.datetime.fromisoformat(advice["issued_at"]) == t(60.2)
    assert await LedgerReader(ledger.pool).job(cluster, "999") is None


async def test_active_advice_is_pending_and_unexpired(ledger, unique):
    cluster = f"c{unique}"
    await insert_timeline(ledger.pool, cluster)
    reader = LedgerReader(ledger.pool)
    active, total = await reader.advice(cluster=cluster, active=True)
    assert [(a["job_id"], a["active"]) for a in active] == [("103", True)] and total == 1
    inactive, _ = await reader.advice(cluster=cluster, active=False)
    assert [a["job_id"] for a in inactive] == ["101"]
    await ledger.pool.execute("UPDATE advice SET expires_at = now() - interval '1 s' WHERE job_id='103'")
    assert (await reader.advice(cluster=cluster, active=True))[1] == 0


async def test_nodes_join_health_history_and_exclusions(ledger, unique):
    cluster = f"c{unique}"
    await insert_timeline(ledger.pool, cluster)
    view = await LedgerReader(ledger.pool).nodes(cluster=cluster, history=2)
    node1 = next(n for n in view if n["node"] == "node1")
    assert node1["verdict"] == "failed" and node1["reasons"] == ["XID 79 on GPU 3"]
    assert [h["verdict"] for h in node1["history"]] == ["failed", "degraded"] and node1["history_total"] == 3
    assert sorted(x["job_id"] for x in node1["excluded_by"]) == ["101", "103"]
    assert next(n for n in view if n["node"] == "node2")["history"] == []


async def test_overrides_add_rows_and_the_newest_wins(ledger, unique):
    cluster = f"c{unique}"
    await insert_timeline(ledger.pool, cluster)
    store, reader = OverrideStore(ledger.pool), LedgerReader(ledger.pool)
    first = await store.record(cluster, "101", "observe", "canary", "ana")
    await store.record(cluster, "101", "act", "canary passed", "ana")
    assert first["mode"] == "observe" and first["id"] > 0
    jobs, _ = await reader.jobs(cluster=cluster)
    assert next(j for j in jobs if j["job_id"] == "101")["mode_override"] == "act"
    detail = await reader.job(cluster, "101")
    assert [o["mode"] for o in detail["overrides"]] == ["observe", "act"] and detail["job"]["mode_override"] == "act"
    assert await store.record(cluster, "999", "act", "", "") is None  # not a job the ledger knows
    with pytest.raises(asyncpg.exceptions.CheckViolationError):
        await store.record(cluster, "101", "sideways", "", "")


async def _collect(sub, count: int, timeout: float = 10.0) -> list:
    got = []
    async with asyncio.timeout(timeout):
        while len(got) < count:
            event = await sub.next(timeout=0.5)
            if event is not None:
                got.append(event)
    return got


async def test_live_events_from_now_from_a_time_and_after_a_sequence(test_stack, unique):
    cluster = f"c{unique}"
    subject = subjects.event_audit(cluster, "101")
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    events = BusEvents(test_stack["RELAUNCH_NATS_URL"])
    await events.start()

    def entry(n: int) -> AuditEntry:
        return AuditEntry(cluster=cluster, job_id="101", service="test", action=f"step{n}",
                          idempotency_key=f"{cluster}.{n}", at=dt.datetime.now(dt.UTC))

    try:
        async with asyncio.timeout(15):
            while not events.connected:
                await asyncio.sleep(0.1)
        before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
        await bus.publish(subject, entry(1), msg_id=f"{cluster}.1")
        live = await events.subscribe(f"relaunch.event.audit.{cluster}.>")
        await bus.publish(subject, entry(2), msg_id=f"{cluster}.2")
        (only_new,) = await _collect(live, 1)
        assert json.loads(only_new.data)["action"] == "step2"  # 'now' skips what came before
        await live.close()

        replay = await events.subscribe(f"relaunch.event.audit.{cluster}.>", since=before)
        first, second = await _collect(replay, 2)
        assert [json.loads(e.data)["action"] for e in (first, second)] == ["step1", "step2"]
        await replay.close()

        resumed = await events.subscribe(f"relaunch.event.*.{cluster}.>", after_seq=first.seq)
        (again,) = await _collect(resumed, 1)
        assert again.seq == second.seq  # Last-Event-ID semantics: right after the one seen
        await resumed.close()

        assert await events.publish(subject, entry(3), msg_id=f"{cluster}.3") is True
    finally:
        await events.close()
        await bus.close()


async def test_a_node_clearance_is_recorded_and_shown(ledger, unique):
    cluster = f"c{unique}"
    await insert_timeline(ledger.pool, cluster)
    store, reader = OverrideStore(ledger.pool), LedgerReader(ledger.pool)
    cleared = await store.clear_node(cluster, "node1", "GPU 3 replaced", "ana")
    assert cleared["forgotten_exclusions"] == 2 and cleared["node"] == "node1"
    view = await reader.nodes(cluster=cluster)
    node1 = next(n for n in view if n["node"] == "node1")
    assert node1["cleared"]["actor"] == "ana" and node1["cleared"]["reason"] == "GPU 3 replaced"
    assert all(h["forgotten"] for h in node1["history"]) and all(x["forgotten"] for x in node1["excluded_by"])
    assert await store.clear_node(cluster, "node9", "", "") is None
    assert await ledger.pool.fetchval("SELECT count(*) FROM node_clearances WHERE cluster=$1", cluster) == 1
