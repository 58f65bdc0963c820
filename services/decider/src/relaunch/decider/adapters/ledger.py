"""The Postgres ledger (the only asyncpg importer on the write side): migrations, job records,
per-job serialised decisions, the transactional outbox. The transactions a decision runs in (JobTx, BatchTx)
and their SQL are ledger_tx.py's; what a decision reads of its nodes beyond the job (gpu-probe readings, other
jobs' exclusions with their owners) is node_evidence.py's SQL.

Concurrency: every decision for a job runs in one transaction holding that job's row lock
(SELECT ... FOR UPDATE), so decider replicas never decide the same attempt twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources

import asyncpg

from relaunch.common import job_states
from relaunch.common.errors import TemporaryError
from relaunch.common.optin import parse_comment
from relaunch.common.postgres_outage import DOWN as POSTGRES_DOWN
from relaunch.common.postgres_outage import postgres_outage
from relaunch.common.schemas import (
    AnomalyDetected, AuditEntry, JobObserved, NodeHealth, ReconcileStatus,
)

from ..domain.attribution import NodeEvent
from ..domain.history import History
from ..domain.policy import Policy
from .ledger_tx import (
    _BATCH_READ, _LOCK_JOB, _OBSERVE_JOB, _TAKE_ANOMALIES, _TAKE_ANOMALY, SUBMIT_TIME_SLACK_S, BatchTx, JobTx,
    _anomaly_args, _batch_args,
    _history, _override,
)
from .node_evidence import evidence_of

log = logging.getLogger(__name__)

MIGRATION_LOCK = 7_341_001
"""pg_advisory_lock key: one decider at a time applies migrations."""

FINAL_STATES = job_states.ATTEMPT_ENDED

def migrations() -> list[tuple[int, str]]:
    folder = resources.files("relaunch.decider").joinpath("migrations")
    items = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            items.append((int(entry.name.split("_", 1)[0]), entry.read_text()))
    return sorted(items)


async def _session(conn: asyncpg.Connection) -> None:
    """Each new connection of the pool: JIT compilation off. A batch's read (`_BATCH_READ`) is cheap to
    run (about 15 ms for 64 anomalies) but the planner's estimate for it is high, so Postgres' defaults
    (jit_above_cost 100,000) compiled it with LLVM first: 1.3-2.1 s in each of the first five runs of
    the statement on a connection (its custom plans), where it then took 10-15 ms. Nothing the ledger
    runs is long enough to gain from JIT. A server without the setting (before Postgres 11) is left as is."""
    try:
        await conn.execute("SET jit = off")
    except asyncpg.exceptions.UndefinedObjectError:
        pass


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset of a connection given back: nothing to undo. The ledger sets no session
    state but `_session`'s, listens to nothing, keeps no cursor, and holds an advisory lock only inside `migrate`,
    which releases it (or closes the connection). asyncpg's default reset (UNLISTEN, RESET ALL...)
    costs a round trip per transaction; a transaction left open is still rolled back by the pool."""


class Ledger:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    @classmethod
    async def connect(cls, dsn: str, *, wait_s: float = 60.0) -> Ledger:
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            try:
                pool = await asyncpg.create_pool(dsn, min_size=1, max_size=10, command_timeout=10,
                                                 init=_session, reset=_keep_session)
                return cls(pool)
            except POSTGRES_DOWN as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise TemporaryError(f"Postgres at {dsn} is not reachable: {exc}") from exc
                log.warning("waiting for Postgres: %s", exc)
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        await self.pool.close()

    async def migrate(self) -> list[int]:
        """Apply pending migrations in order, each in its own transaction; returns those applied."""
        applied = []
        async with self.pool.acquire() as conn:
            await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
            try:
                await conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                                   "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
                done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
                for version, sql in migrations():
                    if version in done:
                        continue
                    async with conn.transaction():
                        await conn.execute(sql)
                        await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
                    applied.append(version)
            finally:
                try:
                    await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
                except BaseException:
                    conn.terminate()  # never back to the pool holding the lock (the pool does not reset it)
                    raise
        return applied

    async def ping(self) -> bool:
        try:
            return await self.pool.fetchval("SELECT 1") == 1
        except Exception:
            return False

    @asynccontextmanager
    async def job_tx(self, cluster: str, job_id: str) -> AsyncIterator[JobTx]:
        """A transaction holding the job's row lock (the row is created if missing)."""
        with postgres_outage():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(_LOCK_JOB, cluster, job_id)  # one round trip, a new job's too
                yield JobTx(conn, cluster, job_id, dict(row))

    @asynccontextmanager
    async def anomaly_tx(self, anomaly: AnomalyDetected) -> AsyncIterator[JobTx]:
        """`job_tx` for a decision on `anomaly`, begun in one round trip (migration 0010): the job's row
        locked, the anomaly recorded (`JobTx.inserted`: False when it was there already) with its
        attempt's step and exit code. Rolled back, as every transaction here, when the caller raises
        (an anomaly that must wait is not kept)."""
        with postgres_outage():
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(_TAKE_ANOMALY, *_anomaly_args(anomaly))
                tx = JobTx(conn, anomaly.cluster, anomaly.job_id, dict(row["job"]))
                tx.inserted = row["inserted"]
                yield tx

    @asynccontextmanager
    async def anomaly_batch(self, anomalies: list[AnomalyDetected], events_since: list[dt.datetime],
                            history_since: dt.datetime, traceparents: list[str | None]) -> AsyncIterator[BatchTx]:
        """`anomaly_tx` and `JobTx.read_for` for a batch of anomalies of different jobs, in one
        transaction of five round trips whatever the batch's size (docs/architecture.md, "Scale"):
        BEGIN; every job locked (in (cluster, job_id) order, as no other batch can then deadlock with
        it) with its anomaly recorded; everything each decision reads; and, at the end of
        `BatchTx.together`, every decision's writes in one statement; then COMMIT. `events_since[i]` is
        anomaly i's; each anomaly's outbox rows carry `traceparents[i]`. Rolled back when the caller raises
        (an anomaly that must wait: the caller begins again without it)."""
        n = range(len(anomalies))
        with postgres_outage():
            async with self.pool.acquire() as conn, conn.transaction():
                taken = await conn.fetch(_TAKE_ANOMALIES, list(n), *_batch_args(anomalies))
                reads = {r["i"]: r for r in await conn.fetch(
                    _BATCH_READ, list(n), [a.cluster for a in anomalies], [a.job_id for a in anomalies],
                    [a.attempt for a in anomalies], [json.dumps(a.nodes) for a in anomalies], events_since,
                    history_since)}
                items: list[tuple[JobTx, History, tuple[str, str] | None, list[NodeEvent], dict]] = []
                for r in sorted(taken, key=lambda r: r["i"]):
                    a, read = anomalies[r["i"]], reads[r["i"]]
                    tx = JobTx(conn, a.cluster, a.job_id, dict(r["job"]))
                    tx.inserted, tx.trace = r["inserted"], (traceparents[r["i"]],)
                    items.append((tx, _history(tx.row, read), _override(read["override"]), *evidence_of(read)))
                yield BatchTx(conn, items)

    async def record_observation(self, obs: JobObserved, policy: Policy) -> None:
        """`policy` is the job's effective policy, resolved from its comment by the caller. Invalid
        options get one audit entry per distinct comment, saying exactly what was wrong."""
        optin = parse_comment(obs.comment)
        final = obs.state in FINAL_STATES
        args = (obs.cluster, obs.job_id, obs.restarts, obs.state, obs.nodes, obs.exit_code,
                obs.observed_at if final else None, obs.name, obs.comment[:4096], obs.partition,
                json.dumps(optin.options), json.dumps(list(policy.option_errors)),
                "observe" if policy.observe_only else "act", obs.reason, policy.name,
                json.dumps(policy.as_dict()), obs.partition_nodes, obs.observed_at, obs.submit_time,
                SUBMIT_TIME_SLACK_S, obs.user_id)
        if not policy.option_errors:
            # The usual case, one round trip (migration 0011): the job on record, its rows written.
            with postgres_outage():
                if await self.pool.fetchval(_OBSERVE_JOB, *args):
                    return
        # Another job with this id (or options to audit): settled with the job locked, then written.
        async with self.job_tx(obs.cluster, obs.job_id) as tx:
            if not await tx.same_job(obs.submit_time):
                return
            if not await tx.conn.fetchval(_OBSERVE_JOB, *args):  # same_job made the submit times agree
                raise RuntimeError(f"job {obs.cluster}/{obs.job_id}: the observation's submit time "
                                   f"{obs.submit_time} still differs from the ledger's after same_job")
            if policy.option_errors:
                digest = hashlib.sha256(obs.comment.encode("utf-8", "replace")).hexdigest()[:16]
                await tx.audit("options_invalid", {"errors": list(policy.option_errors), "policy": policy.name,
                                                   "mode": "observe"},
                               f"decider.options.{obs.cluster}.{obs.job_id}.{digest}", obs.observed_at)

    async def record_reconcile(self, status: ReconcileStatus, dedupe_key: str) -> None:
        async with self.job_tx(status.cluster, status.job_id) as tx:
            inserted = await tx.conn.fetchval(
                """INSERT INTO reconcile_steps (cluster, job_id, generation, status, reason, step, detail, at,
                       dedupe_key) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (dedupe_key) DO NOTHING
                   RETURNING id""",
                status.cluster, status.job_id, status.generation, status.status, status.reason, status.step,
                status.detail, status.at, dedupe_key,
            )
            if inserted is None or status.status == "PENDING":
                return
            await tx.conn.execute(
                """UPDATE advice SET status=$4, status_reason=$5, updated_at=now()
                   WHERE cluster=$1 AND job_id=$2 AND generation=$3 AND status='PENDING'""",
                status.cluster, status.job_id, status.generation, status.status, status.reason,
            )
            advice = await tx.conn.fetchrow(
                "SELECT operation, reason FROM advice WHERE cluster=$1 AND job_id=$2 AND generation=$3",
                status.cluster, status.job_id, status.generation)
            verdict_reason = (f"advice generation {status.generation} {status.status.lower()}: {status.reason}"
                              + (f" ({status.detail})" if status.detail else ""))
            verdict = "watching" if status.status == "CONVERGED" else "stopped"
            if advice is not None and advice["operation"] == "terminate":
                # A terminate Advice carried out is the end of the job, not a recovery: the verdict says
                # the final outcome and why relaunch cancelled it (docs/policy.md, rule table).
                verdict = "stopped"
                if status.status == "CONVERGED":
                    verdict_reason = f"cancelled by relaunch (advice generation {status.generation}): {advice['reason']}"
            await tx.conn.execute(
                "UPDATE jobs SET verdict=$3, verdict_reason=$4, updated_at=now() "
                "WHERE cluster=$1 AND job_id=$2 AND verdict='recovering'",
                status.cluster, status.job_id, verdict, verdict_reason,
            )

    async def record_audit(self, entry: AuditEntry) -> None:
        with postgres_outage():
            await self.pool.execute(
                """INSERT INTO audit (cluster, job_id, service, action, detail, idempotency_key, at)
                   VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (idempotency_key) DO NOTHING""",
                entry.cluster, entry.job_id, entry.service, entry.action, entry.detail, entry.idempotency_key,
                entry.at,
            )

    async def record_node_health(self, health: NodeHealth) -> None:
        """The latest reading per node; every non-healthy one is also kept as history."""
        reasons = json.dumps(health.reasons)
        xids = json.dumps([x.model_dump(mode="json") for x in health.xids])
        with postgres_outage():
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    """INSERT INTO node_health (cluster, node, verdict, reasons, xids, at) VALUES ($1,$2,$3,$4,$5,$6)
                       ON CONFLICT (cluster, node) DO UPDATE SET verdict=EXCLUDED.verdict, reasons=EXCLUDED.reasons,
                           xids=EXCLUDED.xids, at=EXCLUDED.at, updated_at=now()
                       WHERE node_health.at <= EXCLUDED.at""",
                    health.cluster, health.node, health.verdict, reasons, xids, health.at)
                if health.verdict != "healthy":
                    await conn.execute(
                        """INSERT INTO node_events (cluster, node, verdict, reasons, xids, at)
                           VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT DO NOTHING""",
                        health.cluster, health.node, health.verdict, reasons, xids, health.at)

    async def unpublished(self, limit: int = 100) -> list[asyncpg.Record]:
        return await self.pool.fetch(
            "SELECT id, subject, msg_id, payload, traceparent FROM outbox WHERE published_at IS NULL ORDER BY id "
            "LIMIT $1", limit)

    async def mark_published(self, outbox_id: int) -> None:
        await self.pool.execute("UPDATE outbox SET published_at=now() WHERE id=$1", outbox_id)

    async def mark_published_many(self, outbox_ids: list[int]) -> None:
        await self.pool.execute("UPDATE outbox SET published_at=now() WHERE id = ANY($1::bigint[])", outbox_ids)
