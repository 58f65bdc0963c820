"""Operator intents, the only things the API writes: overrides of a job's mode (migration 0004) and
clearances of a repaired node's record (migration 0009). Neither is a decision, and recovery history
is never changed here: each is a new row, the newest wins, the older ones stay as the audit trail.

Who honours it: the decider is to read the newest row per job when it decides (a follow-up; until
then an override is recorded and shown, and the job's own opt-in mode still governs).
"""

from __future__ import annotations

from typing import Any

import asyncpg

from .ledger_read import _row


class OverrideStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def record(self, cluster: str, job_id: str, mode: str, reason: str, actor: str) -> dict[str, Any] | None:
        """Insert an override; None when the ledger has no such job (the foreign key refuses it)."""
        try:
            row = await self.pool.fetchrow(
                """INSERT INTO operator_overrides (cluster, job_id, mode, reason, actor) VALUES ($1,$2,$3,$4,$5)
                   RETURNING id, cluster, job_id, mode, reason, actor, at""",
                cluster, job_id, mode, reason, actor)
        except asyncpg.exceptions.ForeignKeyViolationError:
            return None
        return _row(row)

    async def clear_node(self, cluster: str, node: str, reason: str, actor: str) -> dict[str, Any] | None:
        """Record that `node` was repaired: the decider forgets its exclusions and readings before now
        (docs/policy.md "node history"). None when the ledger has never heard of the node (a typo
        must not pass silently)."""
        async with self.pool.acquire() as conn, conn.transaction():
            known = await conn.fetchval(
                """SELECT EXISTS (SELECT 1 FROM node_health WHERE cluster=$1 AND node=$2)
                       OR EXISTS (SELECT 1 FROM node_events WHERE cluster=$1 AND node=$2)
                       OR EXISTS (SELECT 1 FROM advice WHERE cluster=$1 AND $2 = ANY(exclude_nodes))
                       OR EXISTS (SELECT 1 FROM attempts WHERE cluster=$1 AND $2 = ANY(nodes))""", cluster, node)
            if not known:
                return None
            forgotten = await conn.fetchval(
                """SELECT count(DISTINCT job_id) FROM advice WHERE cluster=$1 AND $2 = ANY(exclude_nodes)
                   AND issued_at > COALESCE((SELECT max(at) FROM node_clearances WHERE cluster=$1 AND node=$2),
                                            '-infinity')""", cluster, node)
            row = await conn.fetchrow(
                """INSERT INTO node_clearances (cluster, node, reason, actor) VALUES ($1,$2,$3,$4)
                   RETURNING id, cluster, node, reason, actor, at""", cluster, node, reason, actor)
        return {**_row(row), "forgotten_exclusions": forgotten}
