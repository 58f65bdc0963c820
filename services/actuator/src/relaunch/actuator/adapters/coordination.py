"""Coordination in NATS KV: the actuator leader lease, and the registry of jobs relaunch holds.

Lease (bucket `relaunch-leases`, entries expire after `ttl_s`): key `actuator.<cluster>` holds the
leader's instance id. The leader renews it every `renew_s` with a compare-and-set on the revision it
owns; a standby tries to create it every `renew_s`. When the leader dies its entry expires, so a
standby takes over within ttl_s + renew_s (6 + 2 s by default). Losing a renewal means losing
leadership at once. A short overlap of two leaders is harmless: every reconcile step re-checks
Slurm's state first, and a requeue needs the restart counter to still equal the failed attempt's.

Fencing (docs/reliability.md, "A partitioned actuator"): a leader cut off from NATS cannot learn
that its lease lapsed, and its last renewal may hang in a request timeout. So leadership is also
bounded by the local clock: `is_leader` holds only until ttl_s - FENCE_MARGIN_S after the last renewal
was sent, once NATS confirmed it (the server expires the entry ttl_s after it received that renewal,
which was later; a renewal slowed by a loaded NATS does not end leadership before that), and
the reconciler asks again right before every Slurm command. No step is taken by an actuator whose
lease may have passed to another. A leader that cannot reach Slurm steps down (`step_down`) and
leaves the lease to a standby for a while, so that one that can reach Slurm carries on.

Holds (bucket `relaunch-holds`, no expiry): key `<cluster>.<job>` is written BEFORE the actuator
runs `scontrol requeuehold`, touched on every reconcile pass, and deleted at a terminal outcome.
The watchdog releases only jobs in this registry, and only when their entry went stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from relaunch.common.errors import TemporaryError
from relaunch.common.natsauth import HOLDS_BUCKET, LEASE_BUCKET  # (the KV buckets' names: NATS users' rights on them)
from relaunch.common.periodic import every

log = logging.getLogger(__name__)

FENCE_MARGIN_S = 1.0
"""Leadership ends this long before the server can expire the lease (coordination's fencing)."""


async def _bucket(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    try:
        return await js.key_value(config.bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            return await js.create_key_value(config)
        except nats.js.errors.BadRequestError:  # created meanwhile by another process
            return await js.key_value(config.bucket)


class Lease:
    def __init__(self, js: JetStreamContext, cluster: str, instance: str, ttl_s: float = 6.0,
                 renew_s: float = 2.0, replicas: int = 1) -> None:
        self.js, self.key, self.instance = js, f"actuator.{cluster}", instance
        self.replicas = replicas
        self.ttl_s, self.renew_s = ttl_s, renew_s
        self._revision: int | None = None
        self._kv: KeyValue | None = None
        self.clock = time.monotonic
        self._valid_until = 0.0
        self._hold_off_until = 0.0

    @property
    def is_leader(self) -> bool:
        """Holding the lease, as far as this process can know: a confirmed renewal within ttl - 1 s."""
        return self._revision is not None and self.clock() < self._valid_until

    async def step_down(self, hold_off_s: float, why: str) -> None:
        """Give the lease up now and do not take it again for `hold_off_s` (a leader that cannot reach
        Slurm, so that a standby that can takes over)."""
        self._hold_off_until = self.clock() + hold_off_s
        if self._revision is None:
            return
        log.warning("actuator %s steps down from %s for %.0f s: %s", self.instance, self.key, hold_off_s, why)
        revision, self._revision = self._revision, None
        try:
            if self._kv is not None:
                await self._kv.delete(self.key, last=revision)
        except Exception as exc:  # the entry expires by itself
            log.info("lease %s: could not delete it on stepping down (%s); it expires in %.0f s",
                     self.key, exc, self.ttl_s)

    async def run(self, stop: asyncio.Event) -> None:
        self._kv = await _bucket(self.js, KeyValueConfig(bucket=LEASE_BUCKET, ttl=self.ttl_s, history=1,
                                                         storage=StorageType.FILE, replicas=self.replicas))
        await every(self.renew_s, self.tick, stop)
        if self.is_leader:  # step down at once so a standby need not wait for the TTL
            try:
                await self._kv.delete(self.key, last=self._revision)
            except Exception:
                pass
            self._revision = None

    async def tick(self) -> None:
        assert self._kv is not None
        value = self.instance.encode()
        if self._revision is None and self.clock() < self._hold_off_until:
            return  # stepped down a moment ago: a standby's turn
        sent = self.clock()
        try:
            if self._revision is not None:
                self._revision = await self._kv.update(self.key, value, last=self._revision)
            else:
                self._revision = await self._kv.create(self.key, value)
                log.info("actuator %s is now the leader for %s", self.instance, self.key)
            self._valid_until = sent + self.ttl_s - FENCE_MARGIN_S
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            if self._revision is not None:
                log.warning("actuator %s lost the lease %s: %s", self.instance, self.key, exc)
            self._revision = None
        except (nats.errors.Error, TimeoutError) as exc:
            # NATS unreachable, or a cluster's bucket without a leader for a moment (no response, 503):
            # standby at once, but the revision is kept, so that the next renewal that gets through
            # takes the lease on at once if nobody else took it meanwhile (wrong last sequence if one did).
            log.warning("lease %s: NATS unavailable (%s: %s); acting as standby", self.key, type(exc).__name__, exc)
            self._valid_until = 0.0


@dataclass(frozen=True)
class Hold:
    cluster: str
    job_id: str
    generation: int
    attempt: int
    touched_at: float


@contextlib.asynccontextmanager
async def _nats_away_is_temporary(what: str) -> AsyncIterator[None]:
    """NATS unreachable, or a cluster's bucket without a leader for a moment: a TemporaryError (the
    reconcile pass is retried with back-off), not a handler failure."""
    try:
        yield
    except (nats.errors.Error, TimeoutError) as exc:
        raise TemporaryError(f"hold registry: cannot {what}: {type(exc).__name__}: {exc}", delay=0.5,
                             backoff=True) from exc


class HoldRegistry:
    def __init__(self, js: JetStreamContext, replicas: int = 1) -> None:
        self.js, self.replicas = js, replicas
        self._kv: KeyValue | None = None

    async def kv(self) -> KeyValue:
        if self._kv is None:
            self._kv = await _bucket(self.js, KeyValueConfig(bucket=HOLDS_BUCKET, history=1,
                                                             storage=StorageType.FILE, replicas=self.replicas))
        return self._kv

    async def record(self, cluster: str, job_id: str, generation: int, attempt: int) -> None:
        hold = {"generation": generation, "attempt": attempt, "touched_at": time.time()}
        async with _nats_away_is_temporary(f"record the hold of {job_id}"):
            await (await self.kv()).put(f"{cluster}.{job_id}", json.dumps(hold).encode())

    async def touch(self, cluster: str, job_id: str) -> None:
        async with _nats_away_is_temporary(f"touch the hold of {job_id}"):
            await self._touch(cluster, job_id)

    async def _touch(self, cluster: str, job_id: str) -> None:
        kv = await self.kv()
        try:
            entry = await kv.get(f"{cluster}.{job_id}")
        except nats.js.errors.KeyNotFoundError:
            return
        hold = json.loads(entry.value or b"{}")
        hold["touched_at"] = time.time()
        try:
            await kv.update(f"{cluster}.{job_id}", json.dumps(hold).encode(), last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # the watchdog or another pass changed it meanwhile: next pass touches again

    async def forget(self, cluster: str, job_id: str) -> None:
        async with _nats_away_is_temporary(f"forget the hold of {job_id}"):
            try:
                await (await self.kv()).purge(f"{cluster}.{job_id}")
            except nats.js.errors.KeyNotFoundError:
                pass

    async def all(self) -> list[Hold]:
        async with _nats_away_is_temporary("list the holds"):
            return await self._all()

    async def _all(self) -> list[Hold]:
        kv = await self.kv()
        try:
            keys = await kv.keys()
        except nats.js.errors.NoKeysError:
            return []
        holds = []
        for key in keys:
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            try:
                data = json.loads(entry.value or b"{}")
                cluster, job_id = key.split(".", 1)
                holds.append(Hold(cluster, job_id, int(data["generation"]), int(data["attempt"]),
                                  float(data["touched_at"])))
            except (ValueError, KeyError):
                log.warning("hold registry: ignoring malformed entry %s", key)
        return holds
