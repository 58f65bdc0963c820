"""Read-only queries over the ledger for the API (the API never writes decisions).

This module and adapters/overrides.py run the API's Postgres queries (adapters/postgres.py makes the
pool); rows leave as plain dicts with timestamps in ISO 8601 and jsonb columns decoded.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import asyncpg

from ..domain import evidence, fleet, lost_time, nodes

_JSON_COLUMNS = ("options", "option_errors", "evidence", "evidence_refs", "policy", "reasons", "xids", "failures")


def _row(record: asyncpg.Record) -> dict[str, Any]:
    out = {}
    for key, value in dict(record).items():
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        elif isinstance(value, str) and key in _JSON_COLUMNS:
            value = json.loads(value)
        out[key] = value
    return out


# The newest operator override per job (migration 0004), joined into job rows.
_OVERRIDE = """LEFT JOIN LATERAL (SELECT o.mode FROM operator_overrides o
                                  WHERE o.cluster=j.cluster AND o.job_id=j.job_id
                                  ORDER BY o.at DESC, o.id DESC LIMIT 1) ov ON true"""
# Each attempt's first anomaly (its initiating error; stragglers are slow runs, not failures), with
# its first evidence lines: what relaunch.common.outcome_words needs for a job's outcome sentence.
_FAILURES = """(SELECT coalesce(jsonb_agg(jsonb_build_object('attempt', f.attempt, 'kind', f.kind,
                       'category', f.category, 'summary', left(f.summary, 500), 'evidence', f.evidence)
                       ORDER BY f.attempt), '[]'::jsonb)
                FROM (SELECT DISTINCT ON (a.attempt) a.attempt, a.kind, a.category, a.summary,
                             (SELECT coalesce(jsonb_agg(l.e), '[]'::jsonb)
                              FROM (SELECT e FROM jsonb_array_elements(a.evidence) e LIMIT 20) l) AS evidence
                      FROM anomalies a WHERE a.cluster=j.cluster AND a.job_id=j.job_id AND a.kind <> 'straggler'
                      ORDER BY a.attempt, a.detected_at) f) AS failures"""
_JOB_FILTER = """($1::text IS NULL OR j.cluster=$1) AND ($2::text[] IS NULL OR j.state = ANY($2))
                 AND ($3::text[] IS NULL OR j.verdict = ANY($3))"""


class LedgerReader:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def ping(self) -> bool:
        try:
            return await self.pool.fetchval("SELECT 1") == 1
        except Exception:
            return False

    async def jobs(self, cluster: str | None = None, states: list[str] | None = None,
                   verdicts: list[str] | None = None, limit: int = 50, offset: int = 0) -> tuple[list[dict], int]:
        """Jobs newest activity first, and how many match in all (for pagination); each with `failures`
        (each attempt's first anomaly: the route turns them into the job's `outcome` and drops them)."""
        filters = (cluster, states or None, verdicts or None)
        rows = await self.pool.fetch(
            f"""SELECT j.*, ov.mode AS mode_override, {_FAILURES},
                   (SELECT count(*) FROM attempts a WHERE a.cluster=j.cluster AND a.job_id=j.job_id) AS attempt_count
               FROM jobs j {_OVERRIDE} WHERE {_JOB_FILTER}
               ORDER BY j.updated_at DESC, j.cluster, j.job_id LIMIT $4 OFFSET $5""",
            *filters, limit, offset,
        )
        total = await self.pool.fetchval(f"SELECT count(*) FROM jobs j WHERE {_JOB_FILTER}", *filters)
        return [_row(r) for r in rows], total

    async def job(self, cluster: str, job_id: str) -> dict[str, Any] | None:
        job = await self.pool.fetchrow(
            f"SELECT j.*, ov.mode AS mode_override FROM jobs j {_OVERRIDE} WHERE j.cluster=$1 AND j.job_id=$2",
            cluster, job_id)
        if job is None:
            return None
        args = (cluster, job_id)
        attempts = await self.pool.fetch(
            "SELECT idx AS index, state, nodes, exit_code, first_seen, updated_at, running_at, ended_at, high_step "
            "FROM attempts WHERE cluster=$1 AND job_id=$2 ORDER BY idx", *args)
        anomalies = [_row(r) for r in await self.pool.fetch(
            "SELECT * FROM anomalies WHERE cluster=$1 AND job_id=$2 ORDER BY detected_at", *args)]
        advice = await self.pool.fetch(
            "SELECT * FROM advice WHERE cluster=$1 AND job_id=$2 ORDER BY generation", *args)
        steps = await self.pool.fetch(
            "SELECT generation, status, reason, step, detail, at FROM reconcile_steps "
            "WHERE cluster=$1 AND job_id=$2 ORDER BY at, id", *args)
        audit = await self.pool.fetch(
            "SELECT service, action, detail, idempotency_key, at FROM audit WHERE cluster=$1 AND job_id=$2 "
            "ORDER BY at, id", *args)
        overrides = await self.pool.fetch(
            "SELECT id, mode, reason, actor, at FROM operator_overrides WHERE cluster=$1 AND job_id=$2 "
            "ORDER BY at, id", *args)
        # What the actuator read of the job's ranks on each hang (docs/architecture.md, "Hang evidence").
        hang_evidence = [{**json.loads(r["body"]), "recorded_at": r["recorded_at"].isoformat()}
                         for r in await self.pool.fetch(
                             "SELECT body, recorded_at FROM hang_evidence WHERE cluster=$1 AND job_id=$2 "
                             "ORDER BY collected_at", *args)]
        # Checkpoint facts (migration 0014): what the job's lost time and ETTR are computed from (docs/goodput.md).
        facts = [dict(r) for r in await self.pool.fetch(
            "SELECT attempt, kind, step, at FROM checkpoint_facts WHERE cluster=$1 AND job_id=$2 ORDER BY at, id",
            *args)]
        figures = lost_time.job_view(dict(job), [dict(r) for r in attempts], anomalies, facts,
                                     [dict(r) for r in audit], dt.datetime.now(dt.UTC))
        by_id = {a["anomaly_id"]: a for a in anomalies}
        advice_out = []
        for a in advice:
            item = _row(a)
            item["evidence"] = evidence.resolve(item.get("evidence_refs") or [], by_id)
            item["reconcile"] = [_row(s) for s in steps if s["generation"] == a["generation"]]
            item.update(evidence.exclusion(item))  # what was really left out, in words too
            advice_out.append(item)
        # The first five keys are what `relaunch jobs show --json` promises; later ones are additive.
        return {
            "job": _row(job),
            "attempts": [_row(r) for r in attempts],
            "anomalies": anomalies,
            "advice": advice_out,
            "audit": [_row(r) for r in audit],
            "overrides": [_row(r) for r in overrides],
            "hang_evidence": hang_evidence,
            "goodput": figures,
        }

    async def advice(self, cluster: str | None = None, active: bool | None = None, limit: int = 50,
                     offset: int = 0) -> tuple[list[dict], int]:
        """Advice newest first. Active: still PENDING and not expired, so the actuator may still act on it."""
        where = """($1::text IS NULL OR a.cluster=$1) AND ($2::boolean IS NULL OR
                   ((a.status='PENDING' AND a.expires_at > now()) = $2))"""
        rows = await self.pool.fetch(
            f"""SELECT a.*, j.name, j.state AS job_state, (a.status='PENDING' AND a.expires_at > now()) AS active
                FROM advice a JOIN jobs j USING (cluster, job_id) WHERE {where}
                ORDER BY a.issued_at DESC, a.cluster, a.job_id, a.generation DESC LIMIT $3 OFFSET $4""",
            cluster, active, limit, offset)
        total = await self.pool.fetchval(f"SELECT count(*) FROM advice a WHERE {where}", cluster, active)
        out = []
        for row in rows:
            item = _row(row)
            item["evidence"] = evidence.resolve(item.get("evidence_refs") or [], {})
            out.append(item)
        return out, total

    async def nodes(self, cluster: str | None = None, history: int = 20) -> list[dict[str, Any]]:
        health = await self.pool.fetch(
            "SELECT cluster, node, verdict, reasons, xids, at FROM node_health WHERE ($1::text IS NULL OR cluster=$1)",
            cluster)
        events = await self.pool.fetch(
            """SELECT cluster, node, verdict, reasons, xids, at, total FROM (
                   SELECT e.*, row_number() OVER w AS rn, count(*) OVER (PARTITION BY cluster, node) AS total
                   FROM node_events e WHERE ($1::text IS NULL OR cluster=$1)
                   WINDOW w AS (PARTITION BY cluster, node ORDER BY at DESC)) ranked
               WHERE rn <= $2""", cluster, history)
        exclusions = await self.pool.fetch(
            """SELECT a.cluster, n.node, a.job_id, j.name, a.generation, a.attempt, a.status, a.reason, a.issued_at
               FROM advice a CROSS JOIN LATERAL unnest(a.exclude_nodes) AS n(node)
               JOIN jobs j USING (cluster, job_id) WHERE ($1::text IS NULL OR a.cluster=$1)""", cluster)
        clearances = await self.pool.fetch(
            """SELECT DISTINCT ON (cluster, node) cluster, node, at, actor, reason FROM node_clearances
               WHERE ($1::text IS NULL OR cluster=$1) ORDER BY cluster, node, at DESC""", cluster)
        return nodes.assemble([_row(r) for r in health], [_row(r) for r in events], [_row(r) for r in exclusions],
                              [_row(r) for r in clearances])

    async def fleet(self, now, days: int = 14, cluster: str | None = None) -> dict[str, Any]:
        """The fleet view's rows of the last `days` days (relaunch.api.domain.fleet), with its goodput."""
        since = now - dt.timedelta(days=days)
        anomalies = await self.pool.fetch(
            "SELECT cluster, job_id, attempt, kind, fault_domain, action, nodes, detected_at FROM anomalies "
            "WHERE detected_at >= $1 AND ($2::text IS NULL OR cluster=$2)", since, cluster)
        advice = await self.pool.fetch(
            "SELECT cluster, job_id, attempt, operation, status, exclude_nodes, evidence_refs, issued_at FROM advice "
            "WHERE issued_at >= $1 AND ($2::text IS NULL OR cluster=$2)", since, cluster)
        attempts = await self.pool.fetch(
            "SELECT cluster, job_id, idx AS index, first_seen FROM attempts WHERE first_seen >= $1 "
            "AND ($2::text IS NULL OR cluster=$2)", since, cluster)
        stops = await self.pool.fetch(
            "SELECT cluster, job_id, at FROM audit WHERE service='decider' AND action IN ('stop', 'terminate') "
            "AND at >= $1 AND ($2::text IS NULL OR cluster=$2)", since, cluster)
        view = fleet.fleet([_row(r) for r in anomalies], [_row(r) for r in advice], [_row(r) for r in attempts],
                           [_row(r) for r in stops], now, days)
        view["goodput"] = await self.goodput(now, since, cluster)
        return view

    async def goodput(self, now: dt.datetime, since: dt.datetime, cluster: str | None = None) -> dict[str, Any]:
        """The fleet's ETTR and lost time (relaunch.api.domain.lost_time.fleet_view) over the jobs active
        since `since`."""
        where = "j.updated_at >= $1 AND ($2::text IS NULL OR j.cluster=$2)"
        jobs = await self.pool.fetch(f"SELECT cluster, job_id, state, verdict, updated_at FROM jobs j WHERE {where}",
                                     since, cluster)
        attempts = await self.pool.fetch(
            f"""SELECT a.cluster, a.job_id, a.idx AS index, a.nodes, a.first_seen, a.running_at, a.ended_at,
                       a.high_step FROM attempts a JOIN jobs j USING (cluster, job_id) WHERE {where}""", since, cluster)
        anomalies = await self.pool.fetch(
            f"""SELECT a.cluster, a.job_id, a.attempt, a.kind, a.fault_domain, a.detected_at, a.last_step
                FROM anomalies a JOIN jobs j USING (cluster, job_id) WHERE {where}""", since, cluster)
        facts = await self.pool.fetch(
            f"""SELECT f.cluster, f.job_id, f.attempt, f.kind, f.step, f.at FROM checkpoint_facts f
                JOIN jobs j USING (cluster, job_id) WHERE {where} ORDER BY f.at, f.id""", since, cluster)
        grouped: dict[tuple[str, str], tuple[dict, list, list, list]] = {
            (r["cluster"], r["job_id"]): (dict(r), [], [], []) for r in jobs}
        for rows, slot in ((attempts, 1), (anomalies, 2), (facts, 3)):
            for r in rows:
                entry = grouped.get((r["cluster"], r["job_id"]))
                if entry is not None:
                    entry[slot].append(dict(r))
        return lost_time.fleet_view(grouped.values(), now, since)
