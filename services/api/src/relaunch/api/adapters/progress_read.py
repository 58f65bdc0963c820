"""Redis, read-only: the detector's progress history of a job (relaunch.common.progress_history)."""

from __future__ import annotations

from redis import asyncio as aioredis

from relaunch.common import progress_history as ph


class ProgressUnavailable(Exception):
    """Redis cannot be read now; the message says what to check."""


class ProgressReader:
    def __init__(self, url: str) -> None:
        self.url = url
        self.r = aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=3, socket_connect_timeout=2)

    async def series(self, cluster: str, job_id: str) -> tuple[list[ph.Bucket], int]:
        try:
            return ph.read(await self.r.hgetall(ph.key(cluster, job_id)))
        except (aioredis.RedisError, OSError) as exc:
            raise ProgressUnavailable(f"Redis (RELAUNCH_REDIS_URL) is not reachable: {exc}") from exc

    async def close(self) -> None:
        await self.r.aclose()
