"""The ledger's hang evidence (migration 0013): recorded from the bus, read for a hang's decision and by
`relaunch jobs show` (docs/architecture.md, "Hang evidence")."""

from __future__ import annotations

import json

import asyncpg

from relaunch.common.postgres_outage import postgres_outage
from relaunch.common.schemas import HangEvidence, dump


async def record(pool: asyncpg.Pool, evidence: HangEvidence) -> None:
    """Once per anomaly: a redelivery (or a second actuator's answer) keeps the first."""
    with postgres_outage():
        await pool.execute(
            """INSERT INTO hang_evidence (anomaly_id, cluster, job_id, attempt, status, blame, place, suspect_nodes,
                                          reason, body, collected_at)
               VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) ON CONFLICT (anomaly_id) DO NOTHING""",
            evidence.anomaly_id, evidence.cluster, evidence.job_id, evidence.attempt, evidence.status,
            evidence.blame, evidence.place, list(evidence.suspect_nodes), evidence.reason,
            dump(evidence).decode(), evidence.collected_at)


async def of_anomaly(pool: asyncpg.Pool, anomaly_id: str) -> dict | None:
    with postgres_outage():
        row = await pool.fetchrow("SELECT body FROM hang_evidence WHERE anomaly_id = $1", anomaly_id)
    return json.loads(row["body"]) if row is not None else None


async def place_before(pool: asyncpg.Pool, cluster: str, job_id: str, attempt: int) -> str | None:
    """The place in the user's code the evidence of the attempt before `attempt` blamed, if it did."""
    with postgres_outage():
        return await pool.fetchval(
            """SELECT place FROM hang_evidence WHERE cluster = $1 AND job_id = $2 AND attempt = $3
                   AND blame = 'user_code' AND place IS NOT NULL ORDER BY collected_at DESC LIMIT 1""",
            cluster, job_id, attempt - 1)
