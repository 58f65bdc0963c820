"""Job identity in the ledger (migration 0007), against a real Postgres: a job id reused with a later
first-attempt submit time is a new job; the earlier job's rows stay, as '<id>@<submit time>'; Advice
generations go on; a requeue (same first submit time) and a late report about the old job change nothing."""

import datetime as dt

import pytest

from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import AnomalyDetected, JobObserved
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
FIRST = NOW - dt.timedelta(hours=2)
SECOND = NOW - dt.timedelta(minutes=5)
DELIVERY = Delivery("s", 1, 1)


def observed(cluster, submit, state="RUNNING", restarts=0, exit_code=None, name="train"):
    return JobObserved(cluster=cluster, job_id="5", name=name, state=state, restarts=restarts, nodes=["node1"],
                       comment="relaunch:max_attempts=3", observed_at=NOW, submit_time=submit, exit_code=exit_code)


def crash(cluster, anomaly_id, attempt=0):
    return AnomalyDetected(anomaly_id=anomaly_id, cluster=cluster, job_id="5", attempt=attempt, kind="crash",
                           source="log", signature_id="segfault", category="segfault", fault_domain="unknown",
                           action="restart", summary="segfault", detected_at=NOW)


async def test_a_reused_job_id_starts_a_new_job_and_keeps_the_old_one(ledger, test_stack, unique):
    cluster = f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    decider = Decider(ledger, OutboxPublisher(bus, ledger))
    try:
        # The first job with id 5: fails, gets Advice generation 1, is requeued (same first submit time).
        await decider.on_job(observed(cluster, FIRST, name="old"), DELIVERY)
        await decider.on_job(observed(cluster, FIRST, "FAILED", exit_code=1, name="old"), DELIVERY)
        await decider.on_anomaly(crash(cluster, f"{cluster}.old.crash"), DELIVERY)
        await decider.on_job(observed(cluster, FIRST, "RUNNING", restarts=1, name="old"), DELIVERY)
        pool = ledger.pool
        assert await pool.fetchval("SELECT count(*) FROM jobs WHERE cluster=$1", cluster) == 1

        # A new job reuses id 5 (submitted later).
        await decider.on_job(observed(cluster, SECOND, name="new"), DELIVERY)
        retired = f"5@{FIRST:%Y%m%dT%H%M%SZ}"
        jobs = {r["job_id"]: r for r in await pool.fetch("SELECT * FROM jobs WHERE cluster=$1", cluster)}
        assert set(jobs) == {"5", retired}
        assert (jobs["5"]["name"], jobs["5"]["restarts"], jobs["5"]["submit_time"]) == ("new", 0, SECOND)
        assert jobs["5"]["verdict"] == "watching"
        assert (jobs[retired]["name"], jobs[retired]["restarts"], jobs[retired]["submit_time"]) == ("old", 1, FIRST)
        old_attempts = await pool.fetch("SELECT idx, state FROM attempts WHERE cluster=$1 AND job_id=$2 ORDER BY idx",
                                        cluster, retired)
        assert [r["idx"] for r in old_attempts] == [0, 1]
        new_attempts = await pool.fetch("SELECT idx, state FROM attempts WHERE cluster=$1 AND job_id='5'", cluster)
        assert [(r["idx"], r["state"]) for r in new_attempts] == [(0, "RUNNING")]
        assert await pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1 AND job_id=$2", cluster, retired) == 1
        assert await pool.fetchval("SELECT count(*) FROM anomalies WHERE cluster=$1 AND job_id=$2",
                                   cluster, retired) == 1
        assert await pool.fetchval("SELECT count(*) FROM audit WHERE cluster=$1 AND job_id=$2", cluster, retired) >= 1

        # A late report about the old job changes nothing; a requeue of the new one is the same job.
        await decider.on_job(observed(cluster, FIRST, "FAILED", restarts=1, exit_code=2, name="old"), DELIVERY)
        await decider.on_job(observed(cluster, SECOND, "FAILED", exit_code=1, name="new"), DELIVERY)
        await decider.on_job(observed(cluster, SECOND, "RUNNING", restarts=1, name="new"), DELIVERY)
        assert await pool.fetchval("SELECT count(*) FROM jobs WHERE cluster=$1", cluster) == 2
        assert await pool.fetchval("SELECT state FROM attempts WHERE cluster=$1 AND job_id=$2 AND idx=1",
                                   cluster, retired) == "RUNNING"

        # The new job's first Advice goes on from the old job's generations (ADVICE keeps one subject per id).
        await decider.on_anomaly(crash(cluster, f"{cluster}.new.crash", attempt=0), DELIVERY)
        generations = await pool.fetch("SELECT generation FROM advice WHERE cluster=$1 AND job_id='5'", cluster)
        assert [r["generation"] for r in generations] == [2]
    finally:
        await bus.close()


async def test_unknown_submit_times_match_the_job_on_record(ledger, unique):
    cluster = f"c{unique}"
    from relaunch.common.policies.policy_set import resolve
    from relaunch.common.optin import parse_comment
    from relaunch.common.policies.policy_file import load_policies
    policy = resolve(parse_comment("relaunch"), load_policies())
    await ledger.record_observation(observed(cluster, None), policy)
    await ledger.record_observation(observed(cluster, FIRST), policy)  # first known time is recorded
    await ledger.record_observation(observed(cluster, None, "FAILED", exit_code=1), policy)
    row = await ledger.pool.fetchrow("SELECT submit_time, state FROM jobs WHERE cluster=$1 AND job_id='5'", cluster)
    assert (row["submit_time"], row["state"]) == (FIRST, "FAILED")
    assert await ledger.pool.fetchval("SELECT count(*) FROM jobs WHERE cluster=$1", cluster) == 1


async def test_the_slurm_adapter_reads_a_job_as_slurm_structured_it_whatever_its_name(test_stack):
    """Issue 35: on the real cluster, a name and a comment that `scontrol show job -o` would print where
    Slurm's own Requeue, Restarts and StdOut fields follow are read as text: the job may be requeued,
    has restarted 0 times, and its output is where Slurm wrote it; the listing says whose job it is."""
    import asyncio
    import os
    import subprocess
    from pathlib import Path

    from relaunch.actuator.adapters.slurm import Slurm
    from relaunch.actuator.domain.observing import output_paths_of, read_listing

    name, comment = "x Requeue=0 Restarts=zz", "relaunch StdOut=/etc/shadow"
    jobs = Path(test_stack["RELAUNCH_RUN_DIR"]) / "jobs"
    jobs.mkdir(exist_ok=True)
    job = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}",
                          "-o", str(jobs / "%x-%j.out"), "--wrap", "echo '[train] step 1'"],
                         check=True, capture_output=True, text=True, cwd=jobs).stdout.strip().split(";")[0]
    slurm = Slurm()
    try:
        for _ in range(200):
            observed = await slurm.observe(job)
            if observed.state == "COMPLETED":
                break
            await asyncio.sleep(0.3)
        assert observed.state == "COMPLETED", observed
        assert observed.requeue_allowed and observed.restarts == 0 and observed.exit_code == "0:0"
        expected = str(jobs / f"{name}-{job}.out")
        assert output_paths_of(await slurm.show_job(job)) == (expected, expected)
        assert "[train] step 1" in Path(expected).read_text()
        (seen,) = [j for j in read_listing(await slurm.list_jobs()).jobs if j.job_id == job]
        assert (seen.name, seen.comment, seen.restarts, seen.stdout) == (name, comment, 0, expected)
        assert (seen.user_id, seen.group_id, seen.work_dir) == (os.getuid(), os.getgid(), str(jobs))
        assert not (await slurm.observe("9999999")).exists
        if test_stack.get("RELAUNCH_SLURMRESTD_URL"):  # 24.11 and 26.05: slurmrestd reads the same
            from relaunch.actuator.adapters.slurmrest import SlurmRest

            rest = SlurmRest(test_stack["RELAUNCH_SLURMRESTD_URL"], test_stack["RELAUNCH_SLURMRESTD_TOKEN_FILE"])
            try:
                assert await rest.observe(job) == observed
                assert output_paths_of(await rest.show_job(job)) == (expected, expected)
                (seen_rest,) = [j for j in read_listing(await rest.list_jobs()).jobs if j.job_id == job]
                assert seen_rest == seen
            finally:
                await rest.close()
    finally:
        subprocess.run(["scancel", job], capture_output=True)
