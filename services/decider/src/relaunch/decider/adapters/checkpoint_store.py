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


async def expected_resume(pool: asyncpg.Pool, cluster: str, job_id: str, attempt: int) -> int | None:
    """The checkpoint step the restart decision on `attempt` expected its successor to resume from (its
    audit entry's resume_step), None when there is none."""
    with postgres_outage():
        value = await pool.fetchval(
            """SELECT (detail::jsonb ->> 'resume_step')::bigint FROM audit
               WHERE cluster = $1 AND job_id = $2 AND service = 'decider' AND action = 'restart'
                 AND detail::jsonb ->> 'attempt' = $3 AND detail::jsonb ? 'resume_step'
               ORDER BY id DESC LIMIT 1""", cluster, job_id, str(attempt))
    return value


async def of_jobs(pool: asyncpg.Pool, jobs: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[Fact, ...]]:
    """(cluster, job_id) -> the job's facts, oldest first, for a batch of jobs in one query."""
    out: dict[tuple[str, str], list[Fact]] = {job: [] for job in jobs}
    with postgres_outage():
        rows = await pool.fetch(
            """SELECT f.cluster, f.job_id, f.attempt, f.kind, f.step, f.at FROM checkpoint_facts f
               JOIN unnest($1::text[], $2::text[]) AS j(cluster, job_id) USING (cluster, job_id)
               ORDER BY f.at, f.id""", [c for c, _ in jobs], [j for _, j in jobs])
    for r in rows:
        out.setdefault((r["cluster"], r["job_id"]), []).append(Fact(r["attempt"], r["kind"], r["step"], r["at"]))
    return {job: tuple(facts) for job, facts in out.items()}
