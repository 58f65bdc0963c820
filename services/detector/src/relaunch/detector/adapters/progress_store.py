"""Redis: each job's progress history at a bounded resolution (relaunch.common.progress_history
describes the hash; the api reads it). One script call per job per batch merges the batch's points
and compacts the hash server-side, atomically, so detector replicas writing one job never lose a
point and nothing per job is kept in the detector's memory."""

from __future__ import annotations

from collections.abc import Iterable

from redis import asyncio as aioredis

from relaunch.common import progress_history as ph

# KEYS[1]: the hash. ARGV: max_buckets, base_width, ttl, then (at, step, throughput|'', step_time|'')*
_ADD = """
local max, w = tonumber(ARGV[1]), tonumber(redis.call('HGET', KEYS[1], 'w') or ARGV[2])
local function dec(v)
  local f = {}
  for x in string.gmatch(v, '([^,]+)') do f[#f + 1] = tonumber(x) end
  return f
end
local function enc(f)
  return string.format('%d,%d,%d,%.6g,%d,%.6g,%d,%.3f,%.3f', f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9])
end
local function mix(a, b)
  return {a[1] + b[1], math.min(a[2], b[2]), math.max(a[3], b[3]), a[4] + b[4], a[5] + b[5], a[6] + b[6],
          a[7] + b[7], math.min(a[8], b[8]), math.max(a[9], b[9])}
end
for i = 4, #ARGV, 4 do
  local at, step = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local tp, st = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local p = {1, step, step, tp or 0, tp and 1 or 0, st or 0, st and 1 or 0, at, at}
  local name = tostring(math.floor(at / w) * w)
  local cur = redis.call('HGET', KEYS[1], name)
  if cur then p = mix(dec(cur), p) end
  redis.call('HSET', KEYS[1], name, enc(p))
  while redis.call('HLEN', KEYS[1]) - 1 > max do
    local all = redis.call('HGETALL', KEYS[1])
    local wider, merged = w * 2, {}
    for j = 1, #all, 2 do
      if all[j] ~= 'w' then
        local s = tostring(math.floor(tonumber(all[j]) / wider) * wider)
        local f = dec(all[j + 1])
        merged[s] = merged[s] and mix(merged[s], f) or f
      end
    end
    redis.call('DEL', KEYS[1])
    for s, f in pairs(merged) do redis.call('HSET', KEYS[1], s, enc(f)) end
    w = wider
  end
end
redis.call('HSET', KEYS[1], 'w', w)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return w
"""


class ProgressStore:
    def __init__(self, url: str, max_buckets: int = ph.MAX_BUCKETS) -> None:
        self.r = aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=3)
        self.max_buckets = max_buckets
        self._add = self.r.register_script(_ADD)

    async def add(self, cluster: str, points: dict[str, list[tuple[float, int, float | None, float | None]]]) -> None:
        """points: job -> (at epoch seconds, step, throughput, step_time_s), in any order."""
        async with self.r.pipeline(transaction=False) as pipe:
            for job_id, found in points.items():
                args: list = [self.max_buckets, ph.BASE_WIDTH_S, ph.TTL_S]
                for at, step, tp, st in found:
                    args += [f"{at:.3f}", step, "" if tp is None else f"{tp:.6g}", "" if st is None else f"{st:.6g}"]
                await self._add(keys=[ph.key(cluster, job_id)], args=args, client=pipe)
            await pipe.execute()

    async def read(self, cluster: str, job_id: str) -> tuple[list[ph.Bucket], int]:
        return ph.read(await self.r.hgetall(ph.key(cluster, job_id)))

    async def close(self) -> None:
        await self.r.aclose()


def points_of(items: Iterable[tuple[str, float, int, float | None, float | None]]) -> dict[str, list]:
    out: dict[str, list] = {}
    for job_id, at, step, tp, st in items:
        out.setdefault(job_id, []).append((at, step, tp, st))
    return out
