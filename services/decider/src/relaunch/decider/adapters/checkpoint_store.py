"""The ledger's checkpoint facts (migration 0014, docs/goodput.md): recorded from the bus, read for a
decision's no-checkpoint rule and the restart's expected resume step."""

from __future__ import annotations

import asyncpg

from relaunch.common.goodput import Fact
from relaunch.common.postgres_outage import postgres_outage
from relaunch.common.schemas import CheckpointFact


async def record(pool: asyncpg.Pool, fact: CheckpointFact) -> None:
    """Once per attempt and step (a save) or per attempt (first step, last progress): every rank's line
    and every redelivery after the first is dropped by the ledger's unique indexes."""
    with postgres_outage():
        await pool.execute(
            """INSERT INTO checkpoint_facts (cluster, job_id, attempt, kind, step, at, source, preset)
               VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING""",
            fact.cluster, fact.job_id, fact.attempt, fact.kind, fact.step, fact.at, fact.source, fact.preset)


async def of_job(pool: asyncpg.Pool, cluster: str, job_id: str) -> tuple[Fact, ...]:
    """The job's facts, oldest first."""
    with postgres_outage():
        rows = await pool.fetch(
            "SELECT attempt, kind, step, at FROM checkpoint_facts WHERE cluster = $1 AND job_id = $2 "
            "ORDER BY at, id", cluster, job_id)
    return tuple(Fact(r["attempt"], r["kind"], r["step"], r["at"]) for r in rows)
