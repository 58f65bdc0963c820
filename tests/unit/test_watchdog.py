"""The watchdog releases only stale holds that relaunch made, and only while Slurm shows them held
(its audit entries through a bus in memory, tests/unit/memorybus.py)."""

import pytest
from memorybus import memory_bus

from relaunch.common import subjects
from relaunch.common.schemas import AuditEntry

from relaunch.actuator.adapters.coordination import Hold
from relaunch.actuator.domain.observing import Observed
from relaunch.actuator.watchdog.sweeping import Watchdog


class FakeSlurm:
    def __init__(self, jobs):
        self.jobs, self.ran = jobs, []

    async def observe(self, job_id):
        return self.jobs.get(job_id, Observed.gone())

    async def run_step(self, step, job_id, nodes=None):
        self.ran.append((step, job_id))


class FakeHolds:
    def __init__(self, holds):
        self.holds = {h.job_id: h for h in holds}

    async def all(self):
        return list(self.holds.values())

    async def forget(self, cluster, job_id):
        self.holds.pop(job_id, None)


HELD = Observed(exists=True, state="PENDING", restarts=1, held=True)


@pytest.mark.parametrize("mode", ["act", "observe"])
async def test_only_stale_holds_are_released(mode):
    slurm = FakeSlurm({"1": HELD, "2": HELD, "3": Observed(exists=True, state="RUNNING", restarts=1)})
    holds = FakeHolds([Hold("c", "1", 1, 0, touched_at=0.0), Hold("c", "2", 1, 0, touched_at=95.0),
                       Hold("c", "3", 1, 0, touched_at=0.0)])
    async with memory_bus("watchdog") as (bus, streams):
        acted = await Watchdog(bus, slurm, holds, mode, bound_s=60).sweep(now=100.0)
    assert acted == ["1"]
    assert "3" not in holds.holds, "a hold Slurm no longer shows is forgotten, not touched"
    assert "2" in holds.holds, "a fresh hold is left to the actuator"
    if mode == "act":
        assert slurm.ran == [("release", "1"), ("start_now", "1")] and "1" not in holds.holds
        (published,) = streams.messages
        assert published.body.action == "released" and published.subject == subjects.event_audit("c", "1")
        assert isinstance(published.body, AuditEntry) and published.msg_id  # deduplicated by JetStream
    else:
        assert slurm.ran == [] and streams.of(AuditEntry)[0].action == "would release"


async def test_a_job_held_by_someone_else_is_never_touched():
    # Held, but the restart counter did not move past the attempt relaunch requeued: not our hold.
    slurm = FakeSlurm({"1": Observed(exists=True, state="PENDING", restarts=0, held=True)})
    holds = FakeHolds([Hold("c", "1", 1, 0, touched_at=0.0)])
    async with memory_bus("watchdog") as (bus, streams):
        assert await Watchdog(bus, slurm, holds, "act", 60).sweep(now=1000.0) == []
    assert slurm.ran == [] and streams.messages == []
