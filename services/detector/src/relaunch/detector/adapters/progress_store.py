"""Redis: each job's progress history at a bounded resolution (relaunch.common.progress_history
describes the hash; the api reads it). One script call per batch merges every job's points and
compacts each hash server-side, atomically, so detector replicas writing one job never lose a point
and nothing per job is kept in the detector's memory. (One call per batch, not one per job: at
10,000 reports a second, packing a command per job cost the detector more than all of its tracking.)"""

from __future__ import annotations

from collections.abc import Iterable

from redis import asyncio as aioredis

from relaunch.common import progress_history as ph

# ARGV: max_buckets, base_width, ttl, the key prefix ('<prefix>:<cluster>:'), then one line per job:
# '<job> <at>,<step>,<throughput|->,<step_time|->;...'. Key names are made here (a standalone Redis,
# as relaunch uses, allows that; a Redis Cluster would not).
_ADD = """
local max, base, ttl, prefix = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4]
local FIELDS = '^([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),([^,]+)$'
local function dec(v)
  local a, b, c, d, e, f, g, h, i = string.match(v, FIELDS)
  return {tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e), tonumber(f), tonumber(g), tonumber(h),
          tonumber(i)}
end
local function enc(f)
  return string.format('%d,%d,%d,%.6g,%d,%.6g,%d,%.3f,%.3f', f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9])
end
local function mix(a, b)
  return {a[1] + b[1], math.min(a[2], b[2]), math.max(a[3], b[3]), a[4] + b[4], a[5] + b[5], a[6] + b[6],
          a[7] + b[7], math.min(a[8], b[8]), math.max(a[9], b[9])}
end
for id, points in string.gmatch(ARGV[5], '(%S+) (%S+)') do
  local key = prefix .. id
  local stored_w = redis.call('HGET', key, 'w')
  local w = tonumber(stored_w or base)
  local write_w = not stored_w  -- written when new or widened
  for at, step, tp, st in string.gmatch(points, '([^,;]+),([^,;]+),([^,;]+),([^,;]+)') do
    at, step, tp, st = tonumber(at), tonumber(step), tonumber(tp), tonumber(st)
    local p = {1, step, step, tp or 0, tp and 1 or 0, st or 0, st and 1 or 0, at, at}
    local name = tostring(math.floor(at / w) * w)
    local cur = redis.call('HGET', key, name)
    if cur then p = mix(dec(cur), p) end
    redis.call('HSET', key, name, enc(p))
    -- only a new bucket makes the hash longer (most points land in one that exists)
    while not cur and redis.call('HLEN', key) - 1 > max do
      local all = redis.call('HGETALL', key)
      local wider, merged = w * 2, {}
      for j = 1, #all, 2 do
        if all[j] ~= 'w' then
          local s = tostring(math.floor(tonumber(all[j]) / wider) * wider)
          local f = dec(all[j + 1])
          merged[s] = merged[s] and mix(merged[s], f) or f
        end
      end
      redis.call('DEL', key)
      for s, f in pairs(merged) do redis.call('HSET', key, s, enc(f)) end
      w, write_w = wider, true
    end
  end
  if write_w then redis.call('HSET', key, 'w', w) end
  redis.call('EXPIRE', key, ttl)
end
return 0
"""


class ProgressStore:
    def __init__(self, url: str, max_buckets: int = ph.MAX_BUCKETS) -> None:
        self.r = aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=3)
        self.max_buckets = max_buckets
        self._add = self.r.register_script(_ADD)

    async def add(self, cluster: str, points: dict[str, list[tuple[float, int, float | None, float | None]]]) -> None:
        """points: job -> (at epoch seconds, step, throughput, step_time_s), in any order."""
        await self.add_flat(cluster, ((job_id, *point) for job_id, found in points.items() for point in found))

    async def add_flat(self, cluster: str, points: Iterable[tuple[str, float, int, float | None, float | None]]
                       ) -> int:
        """(job, at epoch seconds, step, throughput, step_time_s) in any order, in one script call; returns
        how many. Job ids are Slurm's (no spaces); a throughput or step time that is None travels as '-'."""
        lines: dict[str, str] = {}
        count = 0
        for job_id, at, step, tp, st in points:  # formatted in one pass: this runs for every report
            point = f"{at:.3f},{step},{'-' if tp is None else f'{tp:.6g}'},{'-' if st is None else f'{st:.6g}'}"
            before = lines.get(job_id)
            lines[job_id] = point if before is None else before + ";" + point
            count += 1
        if lines:
            await self._add(keys=[], args=[self.max_buckets, ph.BASE_WIDTH_S, ph.TTL_S, ph.key(cluster, ""),
                                           "\n".join(f"{job_id} {found}" for job_id, found in lines.items())])
        return count

    async def read(self, cluster: str, job_id: str) -> tuple[list[ph.Bucket], int]:
        return ph.read(await self.r.hgetall(ph.key(cluster, job_id)))

    async def close(self) -> None:
        await self.r.aclose()
