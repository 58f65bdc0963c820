"""SIGKILL at random moments: the detector, the decider and the actuator are killed (and restarted right
after) while a stream of jobs fails and is recovered, a few at a time on the 4-node cluster.

The schedule (which service, after how long; how fast each job crashes) comes from a fixed seed, so a
run is reproducible up to the operating system's timing. Every recovery must end exactly once:
Slurm's Restarts counter is 1 for every job, each job has its anomaly and one converged Advice in the
ledger, and the ADVICE stream holds that Advice.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time

import pytest
from faults import Result, restore, sigkill, submit, wait_converged
from slurmjobs import job_fields, stack

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

SEED = int(os.environ.get("RELAUNCH_RELIABILITY_SEED", "20261129"))
JOBS = int(os.environ.get("RELAUNCH_RELIABILITY_KILL_JOBS", "20"))
PARALLEL = 4
"""Jobs in flight at once (1-node jobs on the 4-node cluster)."""
KILLED = ("detector", "decider", "actuator")
GAP_S = (1.5, 5.0)
"""Seconds between two kills, drawn uniformly."""
JOB_DEADLINE_S = 120.0
"""A job not completed this long after its submission no longer holds a slot (it is then reported)."""


def kill_schedule(rng: random.Random, rounds: int = 200) -> list[tuple[float, str]]:
    """(seconds to wait, service to kill): each round kills all three, in a random order."""
    return [(round(rng.uniform(*GAP_S), 2), service) for _ in range(rounds) for service in rng.sample(KILLED, 3)]


class Killer(threading.Thread):
    """Follows the schedule until stopped: SIGKILL a service, then start it again at once."""

    def __init__(self, env: dict, schedule: list[tuple[float, str]]) -> None:
        super().__init__(daemon=True)
        self.env, self.schedule = env, schedule
        self.done = threading.Event()
        self.kills: list[tuple[float, str]] = []
        self.error: BaseException | None = None
        self.started_at = time.monotonic()

    def run(self) -> None:
        try:
            for gap, service in self.schedule:
                if self.done.wait(gap):
                    return
                sigkill(self.env, service)
                self.kills.append((round(time.monotonic() - self.started_at, 1), service))
                stack(self.env, "services-up")
        except BaseException as exc:  # reported by the test
            self.error = exc


def run_jobs(env: dict, rng: random.Random) -> tuple[list[str], list[str]]:
    """Submit JOBS jobs, at most PARALLEL unfinished at once; returns (all jobs, jobs past their deadline)."""
    jobs: list[str] = []
    in_flight: dict[str, float] = {}
    late: list[str] = []
    while len(jobs) < JOBS or in_flight:
        for job, submitted in list(in_flight.items()):
            if job_fields(job)["JobState"] == "COMPLETED":
                del in_flight[job]
            elif time.monotonic() - submitted > JOB_DEADLINE_S:
                late.append(job)
                del in_flight[job]
        while len(jobs) < JOBS and len(in_flight) < PARALLEL:
            # Each job crashes after 3 steps of 0.2-0.8 s: the crash lands at a different moment each time.
            job = submit(env, STEP_SECONDS=f"{rng.uniform(0.2, 0.8):.2f}")
            jobs.append(job)
            in_flight[job] = time.monotonic()
            time.sleep(rng.uniform(0.0, 1.0))
        time.sleep(0.5)
    return jobs, late


async def test_services_killed_at_random_points_every_recovery_ends_exactly_once(services):
    rng = random.Random(SEED)
    schedule = kill_schedule(rng)
    result = Result("kill_services", f"SIGKILL of detector, decider or actuator every {GAP_S[0]:.1f}-{GAP_S[1]:.0f} s, "
                                     f"{PARALLEL} jobs in flight", seed=SEED)
    started = time.monotonic()
    killer = Killer(services, schedule)
    killer.start()
    try:
        jobs, late = await asyncio.to_thread(run_jobs, services, rng)
        killer.done.set()
        await asyncio.to_thread(killer.join, 120)
        restore(services)
        result.trials = len(killer.kills)
        by_service = {s: sum(1 for _, k in killer.kills if k == s) for s in KILLED}
        result.notes.append("kills: " + ", ".join(f"{s} {n}" for s, n in by_service.items())
                            + f"; schedule (s after start, service): {killer.kills}")
        if late:
            result.notes.append(f"jobs not completed within {JOB_DEADLINE_S:.0f} s of submission: {late}")
        seen = await wait_converged(services, jobs, timeout=60 if late else 30)
        result.add_jobs(seen)
    finally:
        killer.done.set()
        restore(services)
        result.seconds = time.monotonic() - started
        result.write()
    assert killer.error is None, f"the killer failed: {killer.error!r}"
    assert len(jobs) >= 20 and all(by_service[s] >= 1 for s in KILLED), (len(jobs), by_service)
    result.assert_clean()
