"""The detector's hot state in Redis (the only redis importer): followed jobs, file offsets,
the attempt each job is on, and which attempts already have an anomaly.

Nothing here is needed by another replica that Redis does not hold; a restarted detector resumes
from these keys. Keys: rl:follow:<c> (set of job ids), rl:job:<c>:<job> (hash: attempt, stdout,
stderr, nodes, options, progress_seen, off:<path>), rl:anomaly:<c>:<job>:<attempt>:<kind>,
rl:candidate:<c>:<job>:<attempt>, rl:prog:<c>:<job> (JSON: the attempt's hang and straggler state) and
rl:hangdl:<c> (sorted set: job -> hang deadline, swept by any detector replica).
"""

from __future__ import annotations

import json

from redis import asyncio as aioredis
from redis import exceptions as redis_errors

from relaunch.common.errors import TemporaryError

ANOMALY_TTL_S = 14 * 86400


class HotState:
    def __init__(self, url: str) -> None:
        self.r = aioredis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=3)

    async def ping(self) -> bool:
        try:
            return bool(await self.r.ping())
        except (redis_errors.RedisError, OSError):
            return False

    async def close(self) -> None:
        await self.r.aclose()

    async def _call(self, coro):
        try:
            return await coro
        except (redis_errors.RedisError, OSError) as exc:
            raise TemporaryError(f"Redis unavailable: {exc}", delay=2.0) from exc

    async def followed(self, cluster: str) -> list[str]:
        return sorted(await self._call(self.r.smembers(f"rl:follow:{cluster}")))

    async def job(self, cluster: str, job_id: str) -> dict[str, str]:
        return await self._call(self.r.hgetall(f"rl:job:{cluster}:{job_id}"))

    async def track(self, cluster: str, job_id: str, fields: dict[str, str]) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(f"rl:job:{cluster}:{job_id}", mapping=fields)
        pipe.sadd(f"rl:follow:{cluster}", job_id)
        await self._call(pipe.execute())

    async def untrack(self, cluster: str, job_id: str) -> None:
        await self._call(self.r.srem(f"rl:follow:{cluster}", job_id))

    async def set_offset(self, cluster: str, job_id: str, path: str, offset: int) -> None:
        await self._call(self.r.hset(f"rl:job:{cluster}:{job_id}", f"off:{path}", offset))

    async def has_anomaly(self, cluster: str, job_id: str, attempt: int,
                          kinds: tuple[str, ...] = ("crash", "hang")) -> bool:
        """Whether the attempt already has an anomaly of one of `kinds` (a crash or a hang explains it)."""
        keys = [f"rl:anomaly:{cluster}:{job_id}:{attempt}:{kind}" for kind in kinds]
        return bool(await self._call(self.r.exists(*keys)))

    async def mark_anomaly(self, cluster: str, job_id: str, attempt: int, kind: str, signature_id: str) -> None:
        await self._call(self.r.set(f"rl:anomaly:{cluster}:{job_id}:{attempt}:{kind}", signature_id,
                                    ex=ANOMALY_TTL_S))

    async def progress(self, cluster: str, job_id: str) -> dict | None:
        raw = await self._call(self.r.get(f"rl:prog:{cluster}:{job_id}"))
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    async def save_progress(self, cluster: str, job_id: str, data: dict, deadline: float | None) -> None:
        """Store the attempt's progress state and (re)arm or disarm its hang deadline, atomically."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(f"rl:prog:{cluster}:{job_id}", json.dumps(data), ex=ANOMALY_TTL_S)
        if deadline is None:
            pipe.zrem(f"rl:hangdl:{cluster}", job_id)
        else:
            pipe.zadd(f"rl:hangdl:{cluster}", {job_id: deadline})
        await self._call(pipe.execute())

    async def forget_progress(self, cluster: str, job_id: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(f"rl:prog:{cluster}:{job_id}")
        pipe.zrem(f"rl:hangdl:{cluster}", job_id)
        await self._call(pipe.execute())

    async def due_hangs(self, cluster: str, now: float, limit: int = 500) -> list[str]:
        return await self._call(self.r.zrangebyscore(f"rl:hangdl:{cluster}", "-inf", now, start=0, num=limit))

    async def claim_hang(self, cluster: str, job_id: str) -> bool:
        """Take a due deadline off the set; only the replica whose ZREM removed it handles it."""
        return bool(await self._call(self.r.zrem(f"rl:hangdl:{cluster}", job_id)))

    async def set_candidate(self, cluster: str, job_id: str, attempt: int, anomaly_json: str) -> None:
        """Keep the first cascade-only finding; it is published if nothing better shows up."""
        await self._call(self.r.set(f"rl:candidate:{cluster}:{job_id}:{attempt}", anomaly_json, nx=True,
                                    ex=ANOMALY_TTL_S))

    async def candidate(self, cluster: str, job_id: str, attempt: int) -> str | None:
        return await self._call(self.r.get(f"rl:candidate:{cluster}:{job_id}:{attempt}"))


def nodes_field(nodes: list[str]) -> str:
    return json.dumps(nodes)


def parse_nodes(value: str | None) -> list[str]:
    try:
        nodes = json.loads(value or "[]")
    except ValueError:
        return []
    return [n for n in nodes if isinstance(n, str)]
