"""Operator overrides (migration 0004): the one thing the API writes, and it is a person's intent,
not a decision. Recovery history is never changed here: an override is a new row, the newest wins.

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
