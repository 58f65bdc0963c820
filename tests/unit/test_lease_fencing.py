"""The lease's local fencing (actuator/adapters/coordination.py): a leader cut off from NATS stops
acting before the server can have given its lease to a standby; a leader that stepped down leaves
the lease alone for a while."""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors

from relaunch.actuator.adapters.coordination import Lease


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class KV:
    """The part of a KeyValue the lease uses; `down` makes every call time out as a lost NATS does."""

    def __init__(self) -> None:
        self.revision, self.owner, self.down, self.deleted = 0, None, False, 0

    async def create(self, key, value):
        if self.down:
            raise nats.errors.TimeoutError
        self.revision += 1
        self.owner = value
        return self.revision

    async def update(self, key, value, last):
        if self.down:
            raise self.down if isinstance(self.down, Exception) else nats.errors.TimeoutError
        if last != self.revision:
            raise nats.js.errors.KeyWrongLastSequenceError()
        self.revision += 1
        return self.revision

    async def delete(self, key, last):
        if self.down:
            raise nats.errors.TimeoutError
        self.deleted += 1


def lease() -> tuple[Lease, KV, Clock]:
    lz = Lease(js=None, cluster="c", instance="a", ttl_s=6.0, renew_s=2.0)
    lz._kv, lz.clock = KV(), Clock()
    return lz, lz._kv, lz.clock


def test_a_leader_without_nats_stops_being_one_before_the_server_expires_its_lease():
    lz, kv, clock = lease()
    asyncio.run(lz.tick())
    assert lz.is_leader
    kv.down = True
    clock.t += 2.0
    asyncio.run(lz.tick())  # the renewal times out: standby at once
    assert not lz.is_leader


def test_a_renewal_stuck_in_a_timeout_does_not_keep_leadership_until_the_server_expires_it():
    lz, kv, clock = lease()
    asyncio.run(lz.tick())
    clock.t += 4.9
    assert lz.is_leader  # the next renewal is pending (it hangs in NATS' request timeout)
    clock.t += 0.2
    assert not lz.is_leader  # 5.1 s after the last confirmed renewal: the server keeps it 6 s


def test_a_leader_that_steps_down_leaves_the_lease_to_a_standby_for_a_while():
    lz, kv, clock = lease()
    asyncio.run(lz.tick())
    asyncio.run(lz.step_down(60, "slurmctld does not answer"))
    assert not lz.is_leader and kv.deleted == 1
    clock.t += 30
    asyncio.run(lz.tick())
    assert not lz.is_leader  # held off
    clock.t += 31
    asyncio.run(lz.tick())
    assert lz.is_leader


def test_a_leader_whose_cluster_has_no_stream_leader_for_a_moment_takes_its_lease_back_when_it_answers():
    """A NATS cluster electing a new leader for the lease bucket answers nothing for a few seconds: the
    leader is standby meanwhile, and its next renewal that gets through (same revision: nobody took
    the lease) makes it leader again at once, without waiting for the lease to expire."""
    lz, kv, clock = lease()
    asyncio.run(lz.tick())
    kv.down = nats.js.errors.NoStreamResponseError()
    clock.t += 2.0
    asyncio.run(lz.tick())
    assert not lz.is_leader
    kv.down = False
    clock.t += 2.0
    asyncio.run(lz.tick())
    assert lz.is_leader


def test_a_leader_cut_off_while_a_standby_took_the_lease_gives_it_up_when_it_comes_back():
    lz, kv, clock = lease()
    asyncio.run(lz.tick())
    kv.down = True
    clock.t += 2.0
    asyncio.run(lz.tick())
    kv.down = False
    kv.revision += 5  # the lease expired and a standby created it again
    clock.t += 8.0
    asyncio.run(lz.tick())
    assert not lz.is_leader and lz._revision is None
