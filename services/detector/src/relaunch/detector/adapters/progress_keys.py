"""The progress keys each job's log printed, in Redis (rl:pkeys:<c>:<job>, a set; relaunch.common.progress_keys
says why). Kept beside the detector's hot state, on its connection (adapters/hotstate.py owns the client)."""

from __future__ import annotations

from relaunch.common.progress_keys import MAX_KEYS
from relaunch.common.redis_outage import redis_outage

from .hotstate import HotState

KEYS_TTL_S = 14 * 86400
"""A job's keys are forgotten this long after its last key line (as its anomaly marks are)."""


class ProgressKeys:
    def __init__(self, state: HotState) -> None:
        self.r = state.r
        self.cached: dict[tuple[str, str], set[str]] = {}
        """(cluster, job) -> keys found in Redis already (bounded: cleared past 20,000 jobs): a report's key
        is looked up once per process, not once per report."""

    async def add(self, cluster: str, job_id: str, keys: list[str]) -> None:
        """Record keys read in the job's own log (at most MAX_KEYS a job)."""
        key = f"rl:pkeys:{cluster}:{job_id}"
        with redis_outage():
            if await self.r.scard(key) >= MAX_KEYS:
                return
            pipe = self.r.pipeline(transaction=False)
            pipe.sadd(key, *keys)
            pipe.expire(key, KEYS_TTL_S)
            await pipe.execute()

    async def known(self, cluster: str, wanted: dict[str, set[str]]) -> dict[str, set[str]]:
        """job -> which of the wanted keys its log printed (one round trip for the keys not known here)."""
        out: dict[str, set[str]] = {}
        ask: list[tuple[str, list[str]]] = []
        for job_id, keys in wanted.items():
            have = self.cached.get((cluster, job_id), set())
            out[job_id] = keys & have
            missing = sorted(keys - have)
            if missing:
                ask.append((job_id, missing))
        if ask:
            with redis_outage():
                pipe = self.r.pipeline(transaction=False)
                for job_id, missing in ask:
                    pipe.smismember(f"rl:pkeys:{cluster}:{job_id}", missing)
                replies = await pipe.execute()
            if len(self.cached) > 20_000:
                self.cached.clear()
            for (job_id, missing), found in zip(ask, replies):
                hits = {k for k, hit in zip(missing, found) if hit}
                if hits:
                    self.cached.setdefault((cluster, job_id), set()).update(hits)
                    out[job_id] |= hits
        return out
