"""The Postgres ledger (the only asyncpg importer on the write side): migrations, job records,
per-job serialised decisions, the transactional outbox. What a decision reads of its nodes beyond the
job (gpu-probe readings, other jobs' exclusions with their owners) is node_evidence.py's SQL.

Concurrency: every decision for a job runs in one transaction holding that job's row lock
(SELECT ... FOR UPDATE), so decider replicas never decide the same attempt twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources

import asyncpg

from relaunch.common import job_states, subjects, telemetry
from relaunch.common.errors import TemporaryError
from relaunch.common.optin import parse_comment
from relaunch.common.postgres_outage import DOWN as POSTGRES_DOWN
from relaunch.common.postgres_outage import postgres_outage
from relaunch.common.schemas import (
    Advice, AnomalyDetected, AuditEntry, JobObserved, NodeHealth, ReconcileStatus, dump,
)

from ..domain.attribution import NodeEvent
from ..domain.history import AttemptRecord, History, RestartRecord
from ..domain.policy import Policy
from ..domain.reputation import Exclusion
from .node_evidence import evidence, evidence_of

log = logging.getLogger(__name__)

SUBMIT_TIME_SLACK_S = 1.0
"""Submit times are whole seconds in Slurm; two reports of one job may round differently."""

MIGRATION_LOCK = 7_341_001
"""pg_advisory_lock key: one decider at a time applies migrations."""

FINAL_STATES = job_states.FINAL_STATES | {"REQUEUED"}
"""Attempt states that say the attempt has ended (REQUEUED: this ledger's mark of an attempt Slurm restarted)."""

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


_LOCK_JOB = "SELECT * FROM lock_job($1, $2)"
"""The job's row, locked; made first for a job never seen (migration 0010)."""

_HISTORY = """SELECT
    ARRAY(SELECT ROW(attempt, generation, fault_class, issued_at, operation, status, expires_at, exclude_nodes)
          FROM advice WHERE cluster=$1 AND job_id=$2 ORDER BY generation) AS advice,
    ARRAY(SELECT detail FROM audit WHERE cluster=$1 AND job_id=$2 AND service='decider'
          AND action IN ('stop', 'observe')) AS stopped,
    ARRAY(SELECT ROW(idx, state, exit_code, high_step, first_seen, ended_at, nodes)
          FROM attempts WHERE cluster=$1 AND job_id=$2 ORDER BY idx) AS attempts,
    ARRAY(SELECT ROW(attempt, node, confidence, reasons)
          FROM suspects WHERE cluster=$1 AND job_id=$2 ORDER BY attempt, node) AS suspects,
    ARRAY(SELECT idempotency_key FROM audit WHERE cluster=$1 AND job_id=$2 AND service='actuator'
          AND action='launch refused') AS refused"""
"""Everything History holds, as arrays of rows (asyncpg returns each row as a tuple): one round trip,
where five SELECTs were five."""

_OVERRIDE = """(SELECT ROW(mode, reason, actor) FROM operator_overrides WHERE cluster=$1 AND job_id=$2
                ORDER BY at DESC, id DESC LIMIT 1) AS override"""

_NODE_EVIDENCE = "SELECT " + evidence("$3::text[]", "$4", "$5")
"""node_events and node_history (JobTx) in one statement: $3 the nodes, $4 events since, $5 history since."""

_DECISION_READ = (f"{_HISTORY}, {_OVERRIDE}, " + evidence(
    # The attempt's nodes as the ledger knows them, else the anomaly's ($4): what the caller attributes.
    # (cast, so that ANY() takes it for an array, not for a subquery's rows)
    "(SELECT COALESCE((SELECT nodes FROM attempts WHERE cluster=$1 AND job_id=$2 AND idx=$3"
    " AND cardinality(nodes) > 0), $4::text[]))::text[]", "$5", "$6"))
"""Everything a decision reads once its job is locked, in one round trip: the history, the operator
override and the node evidence ($3 the attempt, $4 the anomaly's nodes, $5 events since, $6 history
since)."""

_OBSERVE_JOB = "SELECT observe_job(" + ",".join(f"${i}" for i in range(1, 22)) + ")"
"""observe_job with the job's owner (migration 0012)."""

_TAKE_ANOMALY = "SELECT job, inserted FROM take_anomaly($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)"


_TAKE_ANOMALIES = """SELECT u.i, t.job, t.inserted
FROM (SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[],
                           $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                           $15::timestamptz[], $16::bigint[], $17::int[])
          AS a(i, anomaly_id, cluster, job_id, attempt, kind, source, signature_id, category, fault_domain, action,
               summary, nodes, evidence, detected_at, last_step, exit_code)
      ORDER BY cluster, job_id, i) AS u
CROSS JOIN LATERAL take_anomaly(u.anomaly_id, u.cluster, u.job_id, u.attempt, u.kind, u.source, u.signature_id,
    u.category, u.fault_domain, u.action, u.summary, ARRAY(SELECT jsonb_array_elements_text(u.nodes::jsonb)),
    u.evidence::jsonb, u.detected_at, u.last_step, u.exit_code) AS t"""
"""take_anomaly for each anomaly of a batch (`Ledger.anomaly_batch`), the jobs locked in (cluster, job_id)
order: the sorted subquery is the outer side of the lateral call, so the calls follow it. Each anomaly's
nodes travel as a JSON text (an array of arrays must be rectangular)."""

_BATCH_READ = ("SELECT u.i, " + re.sub(
    r"\$([1-6])(?!\d)", lambda m: ("u.cluster", "u.job_id", "u.attempt", "u.nodes", "u.events_since", "$7")[
        int(m.group(1)) - 1], _DECISION_READ.removeprefix("SELECT"))
    + """ FROM (SELECT a.i, a.cluster, a.job_id, a.attempt, ARRAY(SELECT jsonb_array_elements_text(a.nodes::jsonb))
                  AS nodes, a.events_since
                FROM unnest($1::int[], $2::text[], $3::text[], $4::int[], $5::text[], $6::timestamptz[])
                  AS a(i, cluster, job_id, attempt, nodes, events_since)) AS u""")
"""`_DECISION_READ` for each anomaly of a batch, read after `_TAKE_ANOMALIES` in the same transaction (so
it sees the attempts' steps and exit codes that wrote): $7 is the history's horizon, the same for all."""


def _batch_args(anomalies: list[AnomalyDetected]) -> list[list]:
    """`_anomaly_args` of each anomaly, column by column (nodes and evidence as JSON texts)."""
    columns = [list(c) for c in zip(*(_anomaly_args(a) for a in anomalies), strict=True)]
    columns[11] = [json.dumps(nodes) for nodes in columns[11]]
    return columns


def _anomaly_args(a: AnomalyDetected) -> tuple:
    return (a.anomaly_id, a.cluster, a.job_id, a.attempt, a.kind, a.source, a.signature_id, a.category,
            a.fault_domain, a.action, a.summary, a.nodes, json.dumps([e.model_dump() for e in a.evidence]),
            a.detected_at, a.last_step, a.exit_code)


class _Writes:
    """The writes of one decision, or of a batch's decisions, sent as one statement (`_WRITE`) whose text
    is always the same: each kind of row travels as arrays, column by column, so that Postgres plans the
    statement once for the connection (a text made of one part per write, different for every mix of
    decisions, was planned at every batch: 1.5-2.6 s for 64 decisions). Parts of one statement see the
    same snapshot and may not change one row twice: a job's verdict is kept once, its last."""

    def __init__(self) -> None:
        self.suspects: list[tuple] = []
        self.joins: list[tuple] = []
        self.advice: list[tuple] = []
        self.outbox: list[tuple] = []
        self.audit: list[tuple] = []
        self.verdicts: dict[tuple[str, str], tuple[str, str]] = {}

    def __bool__(self) -> bool:
        return bool(self.suspects or self.joins or self.advice or self.outbox or self.audit or self.verdicts)

    def args(self) -> list[list]:
        """`_WRITE`'s parameters: each kind's rows as columns (empty lists for a kind not written)."""
        verdicts = [(c, j, v, r) for (c, j), (v, r) in self.verdicts.items()]
        out: list[list] = []
        for rows, width in ((self.suspects, 9), (self.joins, 4), (self.advice, 12), (self.outbox, 4),
                            (self.audit, 6), (verdicts, 4)):
            out += [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
        return out


_WRITE = """WITH
s AS (INSERT INTO suspects (cluster, job_id, attempt, node, confidence, reasons, excluded, anomaly_id, at)
      SELECT u.cluster, u.job_id, u.attempt, u.node, u.confidence, u.reasons::jsonb, u.excluded, u.anomaly_id, u.at
      FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::real[], $6::text[], $7::boolean[], $8::text[],
                  $9::timestamptz[]) AS u(cluster, job_id, attempt, node, confidence, reasons, excluded, anomaly_id, at)
      ON CONFLICT (cluster, job_id, attempt, node) DO UPDATE SET
          excluded = suspects.excluded OR EXCLUDED.excluded,
          confidence = GREATEST(suspects.confidence, EXCLUDED.confidence),
          reasons = CASE WHEN EXCLUDED.confidence > suspects.confidence THEN EXCLUDED.reasons
                         ELSE suspects.reasons END,
          anomaly_id = CASE WHEN EXCLUDED.confidence > suspects.confidence THEN EXCLUDED.anomaly_id
                            ELSE suspects.anomaly_id END,
          at = CASE WHEN EXCLUDED.confidence > suspects.confidence THEN EXCLUDED.at ELSE suspects.at END),
j AS (UPDATE advice SET evidence_refs = advice.evidence_refs || (
          SELECT coalesce(jsonb_agg(r), '[]'::jsonb) FROM jsonb_array_elements(u.refs::jsonb) AS r
          WHERE NOT advice.evidence_refs @> jsonb_build_array(r)), updated_at = now()
      FROM unnest($10::text[], $11::text[], $12::int[], $13::text[]) AS u(cluster, job_id, generation, refs)
      WHERE advice.cluster = u.cluster AND advice.job_id = u.job_id AND advice.generation = u.generation),
a AS (INSERT INTO advice (cluster, job_id, generation, attempt, operation, exclude_nodes, reason, evidence_refs,
          policy, issued_at, expires_at, fault_class)
      SELECT u.cluster, u.job_id, u.generation, u.attempt, u.operation,
             ARRAY(SELECT jsonb_array_elements_text(u.exclude::jsonb)), u.reason, u.refs::jsonb, u.policy::jsonb,
             u.issued_at, u.expires_at, u.fault_class
      FROM unnest($14::text[], $15::text[], $16::int[], $17::int[], $18::text[], $19::text[], $20::text[],
                  $21::text[], $22::text[], $23::timestamptz[], $24::timestamptz[], $25::text[])
          AS u(cluster, job_id, generation, attempt, operation, exclude, reason, refs, policy, issued_at,
               expires_at, fault_class)),
o AS (INSERT INTO outbox (subject, msg_id, payload, traceparent)
      SELECT u.subject, u.msg_id, u.payload, u.traceparent
      FROM unnest($26::text[], $27::text[], $28::bytea[], $29::text[]) WITH ORDINALITY
          AS u(subject, msg_id, payload, traceparent, ord)
      ORDER BY u.ord
      ON CONFLICT (msg_id) DO NOTHING),
au AS (INSERT INTO audit (cluster, job_id, service, action, detail, idempotency_key, at)
       SELECT u.cluster, u.job_id, 'decider', u.action, u.detail, u.key, u.at
       FROM unnest($30::text[], $31::text[], $32::text[], $33::text[], $34::text[], $35::timestamptz[])
           AS u(cluster, job_id, action, detail, key, at)
       ON CONFLICT (idempotency_key) DO NOTHING)
UPDATE jobs SET verdict = u.verdict, verdict_reason = u.reason, updated_at = now()
FROM unnest($36::text[], $37::text[], $38::text[], $39::text[]) AS u(cluster, job_id, verdict, reason)
WHERE jobs.cluster = u.cluster AND jobs.job_id = u.job_id"""
"""Every kind of write a decision makes, for any number of decisions (`_Writes`): the suspects (a node
keeps its most confident finding), evidence joined to an open Advice, new Advice, their outbox rows and
the audit entries' (in the order written: ids follow it), the audit rows, and the jobs' verdicts. The
data-modifying CTEs run whether or not the statement reads them. Text arrays of JSON carry what is an
array or JSON per row (an array of arrays must be rectangular)."""


def _history(job: dict, row: asyncpg.Record) -> History:
    advice = row["advice"]
    decided = {r[0] for r in advice}
    decided |= {json.loads(detail).get("attempt", -1) for detail in row["stopped"]}
    return History(
        decided_attempts=frozenset(decided),
        last_generation=max(max((r[1] for r in advice), default=0),
                            job.get("generation_floor") or 0),  # generations of retired jobs (0007)
        user_cancelled=job_states.as_read(job.get("state") or "", job.get("reason") or "") == "CANCELLED",
        attempts=tuple(AttemptRecord(index=idx, started_at=first_seen, ended_at=ended_at, high_step=high_step,
                                     exit_code=exit_code, state=state, nodes=tuple(nodes or ()))
                       for idx, state, exit_code, high_step, first_seen, ended_at, nodes in row["attempts"]),
        restarts=tuple(RestartRecord(attempt=attempt, generation=generation, fault_class=fault_class, at=issued_at,
                                     status=status, expires_at=expires_at, exclude_nodes=tuple(exclude or ()))
                       for attempt, generation, fault_class, issued_at, operation, status, expires_at, exclude
                       in advice if operation == "restart"),
        partition=job.get("partition") or "",
        partition_nodes=job.get("partition_nodes"),
        suspects=tuple((attempt, node, float(confidence), tuple(json.loads(reasons)))
                       for attempt, node, confidence, reasons in row["suspects"]),
        # The actuator's "launch refused" entries (domain/history.py); the key ends with the attempt.
        launch_refused=frozenset(int(tail) for key in row["refused"]
                                 if (tail := key.rsplit(".", 1)[-1]).isdigit()),
    )


def _override(row) -> tuple[str, str] | None:
    if row is None:
        return None
    mode, reason, actor = row
    who = f" by {actor}" if actor else ""
    return mode, f"an operator switched the job to {mode}{who}: {reason or 'no reason given'}"


class BatchTx:
    """`Ledger.anomaly_batch`'s transaction: for each anomaly, in the batch's order, its job's JobTx and
    what `JobTx.read_for` would have returned."""

    def __init__(self, conn: asyncpg.Connection,
                 items: list[tuple[JobTx, History, tuple[str, str] | None, list[NodeEvent], dict]]) -> None:
        self.conn, self.items = conn, items

    @asynccontextmanager
    async def together(self) -> AsyncIterator[None]:
        """`JobTx.together` for every job of the batch: the writes of all their decisions made inside,
        sent as one statement when the block ends (each job's verdict still written once, its last)."""
        writes = _Writes()
        for tx, *_ in self.items:
            tx._writes = writes
        try:
            yield
        finally:
            for tx, *_ in self.items:
                tx._writes = None
        if writes:
            await self.conn.execute(_WRITE, *writes.args())


class JobTx:
    """Operations inside one job's locked transaction."""

    def __init__(self, conn: asyncpg.Connection, cluster: str, job_id: str, row: dict) -> None:
        self.conn, self.cluster, self.job_id, self.row = conn, cluster, job_id, row
        self.inserted: bool | None = None
        """`Ledger.anomaly_tx`: whether its anomaly was new (None: not begun with an anomaly)."""
        self.trace: tuple[str | None] | None = None
        """The traceparent its outbox rows carry, when not the current context's (a batch's decisions
        are written by one task, each in the trace of its own message)."""
        self._writes: _Writes | None = None

    def _traceparent(self) -> str | None:
        return self.trace[0] if self.trace is not None else telemetry.current_traceparent()

    @asynccontextmanager
    async def together(self) -> AsyncIterator[None]:
        """The writes made inside (save_suspects, save_advice, join_advice, set_verdict, audit) sent as
        one statement when the block ends, one round trip instead of one each; nothing is sent when it
        raises. Nothing inside may read what they write: they are not in the ledger until the end."""
        self._writes = _Writes()
        try:
            yield
            writes = self._writes
        finally:
            self._writes = None
        if writes:
            await self.conn.execute(_WRITE, *writes.args())

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[_Writes]:
        """Where a write method puts its rows: `together`'s writes, or, outside it, its own statement."""
        if self._writes is not None:
            yield self._writes
            return
        writes = _Writes()
        yield writes
        await self.conn.execute(_WRITE, *writes.args())

    async def same_job(self, submit_time) -> bool:
        """Job identity (migration 0007, docs/architecture.md): is an observation with this first-attempt
        submit time about the job on record? A later submit time is a new job that reuses the id: the
        job on record is retired to '<job_id>@<its submit time>' and this row starts afresh (True).
        An earlier one is a late report about a retired job (False: drop it). Unknown times match."""
        known = self.row.get("submit_time")
        if submit_time is None:
            return True
        if known is None:
            await self.conn.execute("UPDATE jobs SET submit_time=$3 WHERE cluster=$1 AND job_id=$2",
                                    self.cluster, self.job_id, submit_time)
            self.row["submit_time"] = submit_time
            return True
        if abs((submit_time - known).total_seconds()) <= SUBMIT_TIME_SLACK_S:
            return True
        if submit_time < known:
            log.info("job %s/%s: dropping a report about an earlier job with this id (submitted %s)",
                     self.cluster, self.job_id, submit_time.isoformat())
            return False
        retired_as = f"{self.job_id}@{known.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}"
        await self.conn.execute("SELECT retire_job($1, $2, $3)", self.cluster, self.job_id, retired_as)
        await self.conn.execute("UPDATE jobs SET submit_time=$3 WHERE cluster=$1 AND job_id=$2",
                                self.cluster, self.job_id, submit_time)
        self.row = dict(await self.conn.fetchrow(_LOCK_JOB, self.cluster, self.job_id))
        log.info("job %s/%s: a new job reuses the id; the earlier one is kept as %s", self.cluster, self.job_id,
                 retired_as)
        return True

    async def history(self) -> History:
        """The job's decision history (domain/history.py), read in one statement."""
        return _history(self.row, await self.conn.fetchrow(_HISTORY, self.cluster, self.job_id))

    async def read_for(self, anomaly: AnomalyDetected, events_since, history_since) -> tuple[
            History, tuple[str, str] | None, list[NodeEvent], dict[str, tuple[Exclusion, ...]]]:
        """The history, the operator override in force (mode, reason; None when there is none) and
        `node_evidence`, in one round trip, for the nodes a decision on `anomaly` attributes: its
        attempt's as the ledger knows them, else the anomaly's own."""
        row = await self.conn.fetchrow(_DECISION_READ, self.cluster, self.job_id, anomaly.attempt, anomaly.nodes,
                                       events_since, history_since)
        return (_history(self.row, row), _override(row["override"])) + evidence_of(row)

    async def node_evidence(self, nodes: list[str], events_since, history_since) -> tuple[
            list[NodeEvent], dict[str, tuple[Exclusion, ...]]]:
        """`node_events` and `node_history` of the same nodes, in one round trip."""
        return evidence_of(await self.conn.fetchrow(_NODE_EVIDENCE, self.cluster, self.job_id, nodes, events_since,
                                                    history_since))

    async def node_history(self, nodes: list[str], since) -> dict[str, tuple[Exclusion, ...]]:
        """node -> reputation.Exclusion (job, issued_at, its owner, corroborated) of each Advice of ANOTHER
        job of this cluster that excluded it since `since` (attribution applies the window itself; the
        query only keeps the read small), after the node's newest clearance, not counting exclusions
        made on history alone (node_evidence.py)."""
        return (await self.node_evidence(nodes, since, since))[1]

    async def save_suspects(self, attempt: int, suspects, excluded, anomaly_id: str, at) -> None:
        """What attribution said of the attempt's nodes; a node keeps its most confident finding. One
        statement for all of them (attribution names each node once; a repeated node is merged first,
        as one statement may not update a row twice)."""
        best: dict[str, object] = {}
        for s in suspects:  # in order: the first of equally confident findings stays, as row by row
            if s.node not in best or s.confidence > best[s.node].confidence:
                best[s.node] = s
        if not best:
            return
        async with self._write() as writes:
            writes.suspects += [(self.cluster, self.job_id, attempt, f.node, f.confidence, json.dumps(list(f.reasons)),
                                 f.node in excluded, anomaly_id, at) for f in best.values()]

    async def join_advice(self, generation: int, refs: list[str]) -> None:
        """Add evidence to an open Advice's ledger row (the published Advice is not changed)."""
        async with self._write() as writes:
            writes.joins.append((self.cluster, self.job_id, generation, json.dumps(refs)))

    async def node_events(self, nodes: list[str], since) -> list[NodeEvent]:
        """The nodes' health events since `since`, after each node's newest clearance, oldest first."""
        return (await self.node_evidence(nodes, since, since))[0]

    async def save_advice(self, advice: Advice, subject: str, msg_id: str, fault_class: str = "unknown") -> None:
        """The Advice's row, its outbox entry and the job's verdict ("recovering"), in one statement."""
        async with self._write() as writes:
            writes.advice.append((advice.cluster, advice.job_id, advice.generation, advice.attempt, advice.operation,
                                  json.dumps(list(advice.exclude_nodes)), advice.reason,
                                  json.dumps(advice.evidence_refs), json.dumps(advice.policy), advice.issued_at,
                                  advice.expires_at, fault_class))
            writes.outbox.append((subject, msg_id, dump(advice), self._traceparent()))
            writes.verdicts[(self.cluster, self.job_id)] = ("recovering", advice.reason)

    async def set_verdict(self, verdict: str, reason: str) -> None:
        async with self._write() as writes:
            writes.verdicts[(self.cluster, self.job_id)] = (verdict, reason)

    async def audit(self, action: str, detail: dict, key: str, at) -> None:
        """The decision's audit row, and the same entry in the outbox for EVENTS (relaunch.event.audit.
        <c>.<job>, Msg-Id = the key), in one statement: custom consumers and the notifier hear of every
        decision, a stop included, exactly once. The decider's own audit consumer skips the entries
        it wrote itself (handlers.Decider.on_audit): the row is here already."""
        text = json.dumps(detail)
        entry = AuditEntry(cluster=self.cluster, job_id=self.job_id, service="decider", action=action,
                           detail=text, idempotency_key=key, at=at)
        async with self._write() as writes:
            writes.audit.append((self.cluster, self.job_id, action, text, key, at))
            writes.outbox.append((subjects.event_audit(self.cluster, self.job_id), key, dump(entry),
                                  self._traceparent()))
