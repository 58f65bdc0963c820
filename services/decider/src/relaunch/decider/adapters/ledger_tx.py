"""The ledger's two transaction types and the SQL they run (part of the Postgres ledger adapter, ledger.py, which
opens them): `JobTx`, every decision for one job in one transaction holding that job's row lock, and `BatchTx`,
a batch of anomalies taken together, each job's JobTx in the batch's order. What a decision reads of its nodes
beyond the job is node_evidence.py's SQL.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from relaunch.common import job_states, subjects, telemetry
from relaunch.common.schemas import (
    Advice, AnomalyDetected, AuditEntry, dump,
)

from ..domain.attribution import NodeEvent
from ..domain.history import AttemptRecord, History, RestartRecord
from ..domain.reputation import Exclusion
from .node_evidence import evidence, evidence_of


log = logging.getLogger(__name__)

SUBMIT_TIME_SLACK_S = 1.0
"""Submit times are whole seconds in Slurm; two reports of one job may round differently."""

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
