"""The watchdog releases only stale holds that relaunch made, and only while Slurm shows them held."""

import pytest

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


class FakeBus:
    def __init__(self):
        self.published = []

    async def publish(self, subject, model, msg_id=None):
        self.published.append(model)


HELD = Observed(exists=True, state="PENDING", restarts=1, held=True)


@pytest.mark.parametrize("mode", ["act", "observe"])
async def test_only_stale_holds_are_released(mode):
    slurm = FakeSlurm({"1": HELD, "2": HELD, "3": Observed(exists=True, state="RUNNING", restarts=1)})
    holds = FakeHolds([Hold("c", "1", 1, 0, touched_at=0.0), Hold("c", "2", 1, 0, touched_at=95.0),
                       Hold("c", "3", 1, 0, touched_at=0.0)])
    bus = FakeBus()
    acted = await Watchdog(bus, slurm, holds, mode, bound_s=60).sweep(now=100.0)
    assert acted == ["1"]
    assert "3" not in holds.holds, "a hold Slurm no longer shows is forgotten, not touched"
    assert "2" in holds.holds, "a fresh hold is left to the actuator"
    if mode == "act":
        assert slurm.ran == [("release", "1"), ("start_now", "1")] and "1" not in holds.holds
        assert bus.published[0].action == "released"
    else:
        assert slurm.ran == [] and bus.published[0].action == "would release"


async def test_a_job_held_by_someone_else_is_never_touched():
    # Held, but the restart counter did not move past the attempt relaunch requeued: not our hold.
    slurm = FakeSlurm({"1": Observed(exists=True, state="PENDING", restarts=0, held=True)})
    holds = FakeHolds([Hold("c", "1", 1, 0, touched_at=0.0)])
    assert await Watchdog(FakeBus(), slurm, holds, "act", 60).sweep(now=1000.0) == []
    assert slurm.ran == []
