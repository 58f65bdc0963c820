"""Read-only queries over the ledger for the API (the API never writes decisions)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg


def _row(record: asyncpg.Record) -> dict[str, Any]:
    out = {}
    for key, value in dict(record).items():
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        elif isinstance(value, str) and key in ("options", "option_errors", "evidence", "evidence_refs", "policy"):
            value = json.loads(value)
        out[key] = value
    return out


class LedgerReader:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def ping(self) -> bool:
        try:
            return await self.pool.fetchval("SELECT 1") == 1
        except Exception:
            return False

    async def jobs(self, cluster: str | None, limit: int, offset: int) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            """SELECT j.*, (SELECT count(*) FROM attempts a WHERE a.cluster=j.cluster AND a.job_id=j.job_id)
                   AS attempt_count
               FROM jobs j WHERE ($1::text IS NULL OR j.cluster=$1)
               ORDER BY j.updated_at DESC LIMIT $2 OFFSET $3""",
            cluster, limit, offset,
        )
        return [_row(r) for r in rows]

    async def job(self, cluster: str, job_id: str) -> dict[str, Any] | None:
        job = await self.pool.fetchrow("SELECT * FROM jobs WHERE cluster=$1 AND job_id=$2", cluster, job_id)
        if job is None:
            return None
        args = (cluster, job_id)
        attempts = await self.pool.fetch(
            "SELECT idx AS index, state, nodes, exit_code, first_seen, updated_at FROM attempts "
            "WHERE cluster=$1 AND job_id=$2 ORDER BY idx", *args)
        anomalies = await self.pool.fetch(
            "SELECT * FROM anomalies WHERE cluster=$1 AND job_id=$2 ORDER BY detected_at", *args)
        advice = await self.pool.fetch(
            "SELECT * FROM advice WHERE cluster=$1 AND job_id=$2 ORDER BY generation", *args)
        steps = await self.pool.fetch(
            "SELECT generation, status, reason, step, detail, at FROM reconcile_steps "
            "WHERE cluster=$1 AND job_id=$2 ORDER BY at, id", *args)
        audit = await self.pool.fetch(
            "SELECT service, action, detail, idempotency_key, at FROM audit WHERE cluster=$1 AND job_id=$2 "
            "ORDER BY at, id", *args)
        advice_out = []
        for a in advice:
            item = _row(a)
            item["reconcile"] = [_row(s) for s in steps if s["generation"] == a["generation"]]
            advice_out.append(item)
        return {
            "job": _row(job),
            "attempts": [_row(r) for r in attempts],
            "anomalies": [_row(r) for r in anomalies],
            "advice": advice_out,
            "audit": [_row(r) for r in audit],
        }
