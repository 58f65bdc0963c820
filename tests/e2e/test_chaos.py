"""Chaos on the real stack: the actuator killed with SIGKILL at each step of a restart with an
exclusion, a leader failover, and the watchdog releasing a job when no actuator is left."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from slurmjobs import REPO, job_fields, kill9, ledger, sbatch, stack, wait_for_the_actuator_to_lead, wait_until

from relaunch.client.events import EventStream
from relaunch.common.schemas import AuditEntry

pytestmark = pytest.mark.e2e
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


async def submit_and_wait_for_step(env: dict, step: str) -> str:
    """Submit a job whose first attempt hits a hardware fault; return once the actuator did `step`."""
    async with EventStream(env["RELAUNCH_NATS_URL"], f"relaunch.event.audit.{env['RELAUNCH_CLUSTER']}.>") as events:
        # Steps of 1 s: the observer (1 s polls) sees the first attempt running, so its node is known.
        job = sbatch(env, "flaky-train.sh", "relaunch:max_attempts=2", STEP_SECONDS="1", CRASH_LINE=ECC)
        while True:
            _, msg = await events.next(timeout=60)
            if isinstance(msg, AuditEntry) and msg.job_id == job and msg.action == step:
                return job


def assert_restarted_once_without_the_bad_node(job: str) -> None:
    fields = wait_until("the job to complete", lambda: (f := job_fields(job))["JobState"] == "COMPLETED" and f,
                        timeout=90)
    assert fields["Restarts"] == "1", f"job {job} restarted {fields['Restarts']} times"
    record = wait_until("the ledger", lambda: (r := ledger(job)) and len(r["attempts"]) == 2 and r["advice"] and r)
    (advice,) = record["advice"]
    assert advice["exclude_nodes"] == record["attempts"][0]["nodes"] != [], record
    assert set(advice["exclude_nodes"]) <= set(fields["ExcNodeList"].split(",")), fields["ExcNodeList"]
    assert fields["NodeList"] not in advice["exclude_nodes"]


@pytest.mark.parametrize("step", ["requeuehold", "exclude", "release"])
async def test_actuator_killed_after_each_step_restarts_exactly_once(services, slurm_api, step):
    job = await submit_and_wait_for_step(services, step)
    kill9(services, "actuator")
    stack(services, "services-up")  # a fresh actuator: it waits out the dead one's lease, then resumes
    assert_restarted_once_without_the_bad_node(job)


async def test_standby_converges_when_the_leader_dies(services, slurm_api):
    with socket.socket() as free:  # any free port: the stack's own (scripts/stack.sh HEALTH_*) are taken
        free.bind(("127.0.0.1", 0))
        health_port = free.getsockname()[1]
    env = {**os.environ, **services, "RELAUNCH_ACTUATOR_HEALTH_PORT": str(health_port),
           "RELAUNCH_ACTUATOR_INSTANCE": "standby", "RELAUNCH_SLURM_API": slurm_api}
    log = open(os.path.join(services["RELAUNCH_RUN_DIR"], "log", "actuator-standby.log"), "ab")
    standby = subprocess.Popen([sys.executable, "-m", "relaunch.actuator"], env=env, stdout=log, stderr=log,
                               cwd=REPO)
    try:
        time.sleep(3)
        job = await submit_and_wait_for_step(services, "requeuehold")
        kill9(services, "actuator")  # the leader (the stack's actuator held the lease first)
        assert_restarted_once_without_the_bad_node(job)
    finally:
        standby.terminate()
        standby.wait(timeout=20)
        log.close()
        stack(services, "services-up")
        wait_for_the_actuator_to_lead(services)


async def test_watchdog_releases_a_held_job_when_no_actuator_is_left(services, slurm_api):
    job = await submit_and_wait_for_step(services, "requeuehold")
    kill9(services, "actuator")
    try:
        fields = wait_until("the watchdog to release the job",
                            lambda: (f := job_fields(job))["JobState"] in ("RUNNING", "COMPLETED") and f, timeout=45)
        assert fields["Restarts"] == "1"
        record = wait_until("the watchdog's audit entry in the ledger",
                            lambda: (r := ledger(job)) and any(a["service"] == "watchdog" for a in r["audit"]) and r)
        (entry,) = [a for a in record["audit"] if a["service"] == "watchdog"]
        assert entry["action"] == "released" and "no actuator advanced" in entry["detail"]
    finally:
        stack(services, "services-up")
    wait_until("the job to complete", lambda: job_fields(job)["JobState"] == "COMPLETED", timeout=60)
    assert job_fields(job)["Restarts"] == "1"
