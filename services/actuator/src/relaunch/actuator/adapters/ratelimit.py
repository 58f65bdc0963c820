"""The cluster-wide action rate limit: a token bucket in Redis (the actuator's only redis importer).

Every actuator replica (and a restarted one) draws from the same bucket, so the blast radius of a
storm of Advice is bounded cluster-wide. The bucket is updated in one Lua script, with Redis' own
clock, so concurrent takers never both get the last token. Redis unavailable -> TemporaryError:
the step waits (fail closed); nothing is held yet at that point, so nothing is stranded. That
wait is never silent: `redis` (a Reachability, the actuator's "redis" health check) logs the outage
at WARNING and reports not-ready until Redis answers again.
"""

from __future__ import annotations

from redis import asyncio as aioredis

from relaunch.common.errors import TemporaryError
from relaunch.common.health import Reachability
from relaunch.common.redis_outage import DOWN, redis_outage

_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local data = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(data[1]) or burst
local at = tonumber(data[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], 86400)
return {allowed, tostring(wait)}
"""


class ActionRateLimit:
    def __init__(self, url: str, cluster: str, per_minute: float, burst: int) -> None:
        self.r = aioredis.from_url(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=3)
        self.key = f"rl:actuator:bucket:{cluster}"
        self.rate = per_minute / 60.0
        self.burst = burst
        self._take = self.r.register_script(_TAKE)
        self.redis = Reachability("Redis (RELAUNCH_REDIS_URL, the cluster-wide action rate limit)", url)

    async def take(self) -> None:
        """Take one action token, or raise TemporaryError with the wait until the next one."""
        with redis_outage("rate limiter (Redis)", delay=2.0, backoff=False, also=lambda exc: self.redis.failed(
                f"{exc}; no requeue or cancel can be taken until it answers")):
            allowed, wait = await self._take(keys=[self.key], args=[self.rate, self.burst])
        self.redis.succeeded()
        if int(allowed) != 1:
            raise TemporaryError(f"cluster-wide action rate limit reached ({self.rate * 60:g}/min)",
                                 delay=max(0.1, float(wait)))

    async def ping(self) -> bool:
        """Whether Redis answers (and `redis` updated, as take() does)."""
        try:
            return self.redis.record(bool(await self.r.ping()))
        except DOWN as exc:
            return self.redis.record(False, exc)

    async def close(self) -> None:
        await self.r.aclose()
