"""The detector's hot state in Redis (the only redis importer): followed jobs, file offsets,
the attempt each job is on, and which attempts already have an anomaly.

Nothing here is needed by another replica that Redis does not hold; a restarted detector resumes
from these keys. Keys: rl:follow:<c> (set of job ids), rl:job:<c>:<job> (hash: attempt, stdout,
stderr, nodes, options, progress_seen, off:<path>), rl:anomaly:<c>:<job>:<attempt>:<kind>,
rl:candidate:<c>:<job>:<attempt>, rl:prog:<c>:<job> (JSON: the attempt's hang and straggler state),
rl:hangdl:<c> (sorted set: job -> hang deadline, swept by any detector replica) and rl:built:<c>
(present while this Redis holds rebuilt state; its absence means the data was lost).
"""

from __future__ import annotations

import json

import orjson
from redis import asyncio as aioredis
from redis import exceptions as redis_errors

from relaunch.common.errors import TemporaryError

ANOMALY_TTL_S = 14 * 86400
MAX_CONNECTIONS = 64
PROGRESS_FIELDS = ("attempt", "options", "progress_seen")
# Progress states are JSON of a few hundred floats, read and written for every report: orjson does
# that 3-8 times faster than json (the same text, so states written by either read back alike).
"""The fields of a job's hash that progress tracking reads (HMGET: not its file offsets and paths)."""


class HotState:
    def __init__(self, url: str) -> None:
        # A blocking pool: when every connection is busy (many jobs handled at once) a command waits for
        # one instead of failing with "Too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=5,
                                                        decode_responses=True, socket_timeout=5,
                                                        socket_connect_timeout=3)
        self.r = aioredis.Redis.from_pool(pool)
        self._read_progress = self.r.register_script(_READ_PROGRESS)
        self._save_progress = self.r.register_script(_SAVE_PROGRESS)

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
            raise TemporaryError(f"Redis unavailable: {exc}", delay=1.0, backoff=True) from exc

    async def followed(self, cluster: str) -> list[str]:
        return sorted(await self._call(self.r.smembers(f"rl:follow:{cluster}")))

    async def paths_many(self, cluster: str, job_ids: list[str]) -> dict[str, tuple[str, ...]]:
        """Each job's log files (stdout, stderr; distinct, non-empty), in one round trip."""
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(f"rl:job:{cluster}:{job_id}", ("stdout", "stderr"))
        replies = await self._call(pipe.execute())
        return {job_id: tuple(dict.fromkeys(p for p in paths if p)) for job_id, paths in zip(job_ids, replies)}

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
            return orjson.loads(raw) if raw else None
        except ValueError:
            return None

    async def save_progress(self, cluster: str, job_id: str, data: dict, deadline: float | None) -> None:
        """Store the attempt's progress state and (re)arm or disarm its hang deadline, atomically."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(f"rl:prog:{cluster}:{job_id}", orjson.dumps(data), ex=ANOMALY_TTL_S)
        if deadline is None:
            pipe.zrem(f"rl:hangdl:{cluster}", job_id)
        else:
            pipe.zadd(f"rl:hangdl:{cluster}", {job_id: deadline})
        await self._call(pipe.execute())

    async def progress_many(self, cluster: str, job_ids: list[str]) -> dict[str, tuple[dict[str, str], dict | None]]:
        """For each job, what progress tracking reads (its attempt, options and progress_seen fields) and
        its progress state: one command for all of them (a script; per-command client work, not Redis,
        is what costs at thousands of jobs a second)."""
        if not job_ids:
            return {}
        keys = [k for job_id in job_ids for k in (f"rl:job:{cluster}:{job_id}", f"rl:prog:{cluster}:{job_id}")]
        replies = await self._call(self._read_progress(keys=keys, args=list(PROGRESS_FIELDS)))
        out = {}
        for i, job_id in enumerate(job_ids):
            fields, raw = replies[2 * i], replies[2 * i + 1]
            try:
                data = orjson.loads(raw) if raw else None
            except ValueError:
                data = None
            out[job_id] = ({k: v for k, v in zip(PROGRESS_FIELDS, fields) if v is not None}, data)
        return out

    async def save_progress_many(self, cluster: str, saves: list[tuple[str, dict, float | None, bool]]) -> None:
        """save_progress for many jobs at once, atomically (one script): (job, state, deadline, first
        progress seen, which marks the job's progress_seen)."""
        if not saves:
            return
        keys, args = [], [str(ANOMALY_TTL_S)]
        for job_id, data, deadline, first in saves:
            keys += [f"rl:prog:{cluster}:{job_id}", f"rl:job:{cluster}:{job_id}"]
            args += [job_id, orjson.dumps(data), "" if deadline is None else repr(deadline), "1" if first else "0"]
        keys.append(f"rl:hangdl:{cluster}")
        await self._call(self._save_progress(keys=keys, args=args))

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

    async def claim_rebuild(self, cluster: str) -> bool:
        """True once per loss of this Redis's data: the marker rl:built:<c> was missing and is now ours
        (relaunch.detector.rebuilding follows every job again)."""
        return bool(await self._call(self.r.set(f"rl:built:{cluster}", "1", nx=True)))

    async def release_rebuild(self, cluster: str) -> None:
        await self._call(self.r.delete(f"rl:built:{cluster}"))


_READ_PROGRESS = """
-- KEYS: per job, its hash then its progress key; ARGV: the hash fields to read.
local out = {}
for i = 1, #KEYS, 2 do
  out[#out + 1] = redis.call('HMGET', KEYS[i], unpack(ARGV))
  out[#out + 1] = redis.call('GET', KEYS[i + 1])
end
return out
"""

_SAVE_PROGRESS = """
-- KEYS: per job, its progress key then its hash; last, the hang-deadline set.
-- ARGV: the TTL, then per job: its id, its state (JSON), its deadline ('' disarms), '1' to mark progress_seen.
local deadlines = KEYS[#KEYS]
for i = 1, (#KEYS - 1) / 2 do
  local a = 2 + (i - 1) * 4
  redis.call('SET', KEYS[2 * i - 1], ARGV[a + 1], 'EX', ARGV[1])
  if ARGV[a + 2] == '' then
    redis.call('ZREM', deadlines, ARGV[a])
  else
    redis.call('ZADD', deadlines, ARGV[a + 2], ARGV[a])
  end
  if ARGV[a + 3] == '1' then
    redis.call('HSET', KEYS[2 * i], 'progress_seen', '1')
  end
end
return 0
"""


def nodes_field(nodes: list[str]) -> str:
    return json.dumps(nodes)


def parse_nodes(value: str | None) -> list[str]:
    try:
        nodes = json.loads(value or "[]")
    except ValueError:
        return []
    return [n for n in nodes if isinstance(n, str)]
