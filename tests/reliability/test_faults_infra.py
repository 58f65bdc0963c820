"""Infrastructure faults in the middle of recoveries, on the real stack: NATS restarted, Postgres down
for 30 s, Redis flushed and restarted, slurmctld restarted. Each ends with the same question: did every
recovery end exactly once (Slurm's Restarts counter, the ledger, the ADVICE stream), and was anything lost?
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import urllib.request

import pytest
import redis
from faults import (
    Result, awaiting_ack, restore, sbatch, sigkill, stop_server, submit, submit_and_wait_for_step, wait_converged,
)
from slurmjobs import job_fields, ledger, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]


def consumed(env: dict, port_offset: int, consumer: str, outcome: str) -> float:
    """relaunch_messages_consumed_total for one consumer and outcome, from a service's /metrics."""
    url = f"http://127.0.0.1:{int(env['RELAUNCH_PORT_BASE']) + port_offset}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("relaunch_messages_consumed_total{") and f'consumer="{consumer}"' in line \
                and f'outcome="{outcome}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


DECIDER_HEALTH = 92  # scripts/stack.sh: HEALTH_DECIDER = PORT_BASE + 92


async def fault_mid_recovery(services: dict, result: Result, step: str, fault, pause_s: float,
                             timeout: float = 90) -> None:
    """Wait until the actuator has taken `step` of a recovery, apply `fault`, wait `pause_s`, start what
    is down again, and check that the recovery still ends exactly once."""
    started = time.monotonic()
    try:
        job = await submit_and_wait_for_step(services, step, STEP_SECONDS="0.5")
        fault()
        await asyncio.sleep(pause_s)
        restore(services)
        result.trials = 1
        seen = await wait_converged(services, [job], timeout=timeout)
        result.add_jobs(seen)
    finally:
        restore(services)
        result.seconds = time.monotonic() - started
        result.write()
    result.assert_clean()


@pytest.mark.parametrize("step", ["requeuehold", "release"])
async def test_nats_restarted_mid_recovery_completes_exactly_once(services, step):
    result = Result(f"faults_nats_restart_{step}",
                    f"NATS server killed and restarted after `{step}` (JetStream store on disk kept)")
    # every service sees the connection drop and keeps reconnecting for 2 s
    await fault_mid_recovery(services, result, step, lambda: sigkill(services, "nats"), pause_s=2)


async def test_slurmctld_restarted_during_a_reconcile_converges_exactly_once(services):
    result = Result("faults_slurmctld_restart", "slurmctld stopped for 3 s and restarted after `release`")
    # The actuator's next Slurm command (start_now) fails: it must look again, see that the job was
    # already requeued (Restarts advanced) and finish without a second requeue.
    # The fault comes after `release`, not right after `requeuehold`: Slurm 22.05 has a hazard of its
    # own there. A requeued job gets a new accounting record; if slurmctld stops while it is asking
    # slurmdbd for that record's index, the job is saved with the index "being set" and, after the
    # restart, every update of it is refused ("the DB index is being set") until it starts, which a
    # held job never does (seen once in CI: stopped 42 ms after requeuehold, refused for 6+ minutes).
    # test_faults_slurm_accounting.py makes that state on purpose and checks that the actuator reports
    # it. A released job is not stuck by it: the scheduler starts it after Slurm's 120 s requeue delay
    # at the latest, and the start sets the index.
    await fault_mid_recovery(services, result, "release", lambda: stop_server(services, "slurmctld"), pause_s=3,
                             timeout=150)


async def test_postgres_down_30s_decider_backs_off_and_issues_the_advice_after(services):
    result = Result("faults_postgres_down", "Postgres down for 30 s while a job fails")
    started = time.monotonic()
    decider_pid = open(f"{services['RELAUNCH_RUN_DIR']}/pids/decider.pid").read().strip()
    naks_before = consumed(services, DECIDER_HEALTH, "decider-anomalies", "nak")
    try:
        stop_server(services, "postgres")
        down_at = time.monotonic()
        job = submit(services, STEP_SECONDS="0.3")
        wait_until("the job to fail", lambda: job_fields(job)["JobState"] == "FAILED", timeout=30)
        await asyncio.sleep(max(0.0, 30 - (time.monotonic() - down_at)))
        # Nothing can be decided without the ledger: no Advice, no restart, while it is down.
        assert job_fields(job)["Restarts"] == "0" and job_fields(job)["JobState"] == "FAILED"
        naks = consumed(services, DECIDER_HEALTH, "decider-anomalies", "nak") - naks_before
        # Every anomaly waiting for the ledger is retried, this job's and any other still arriving.
        retried = max(1, await awaiting_ack(services["RELAUNCH_NATS_URL"], "EVENTS", "decider-anomalies"))
        result.trials = 1
        result.notes.append(f"the decider nak'd {retried} anomal{'y' if retried == 1 else 'ies'} {naks:.0f} times in "
                            "30 s (nak with a delay doubling from 1 s to 8 s, no hot loop), and issued the Advice "
                            "after Postgres returned")
        restore(services)
        up_at = dt.datetime.now(dt.UTC)
        seen = await wait_converged(services, [job], timeout=60)
        result.add_jobs(seen)
    finally:
        restore(services)
        result.seconds = time.monotonic() - started
        result.write()
    result.assert_clean()
    # A delay doubling from 1 s up to 8 s gives ~7 redeliveries of one anomaly in 30 s; a hot loop, hundreds.
    assert 1 <= naks <= 10 * retried, f"{naks} naks of {retried} anomalies in 30 s: the decider should back off"
    assert open(f"{services['RELAUNCH_RUN_DIR']}/pids/decider.pid").read().strip() == decider_pid, \
        "the decider was restarted: it should have ridden out the outage"
    (advice,) = ledger(job)["advice"]
    issued = dt.datetime.fromisoformat(advice["issued_at"])
    assert issued >= up_at - dt.timedelta(seconds=2), f"Advice issued at {issued}, Postgres back at {up_at}"


async def test_redis_flushed_and_restarted_hang_and_crash_still_detected(services):
    result = Result("faults_redis_flush", "Redis flushed and restarted while jobs run (a hang and a crash follow)")
    started = time.monotonic()
    env = services
    try:
        # The hang job prints 8 iterations a second apart, then stops; the crash job segfaults after ~6 s.
        hang = sbatch(env, "megatron-like.sh", "relaunch:max_attempts=2", STEPS="14", STEP_SECONDS="1",
                      HANG_AFTER="9")
        crash = submit(env, STEP_SECONDS="2")
        r = redis.Redis.from_url(env["RELAUNCH_REDIS_URL"], decode_responses=True)
        follow = f"rl:follow:{env['RELAUNCH_CLUSTER']}"
        wait_until("the detector to follow both jobs and see the hang job's progress",
                   lambda: {hang, crash} <= r.smembers(follow) and r.exists(f"rl:prog:{env['RELAUNCH_CLUSTER']}:{hang}"),
                   timeout=30)
        r.flushall()
        r.close()
        sigkill(env, "redis")  # started with --save '': it comes back empty
        restore(env)
        result.trials = 1
        seen = await wait_converged(env, [hang, crash], timeout=90)
        result.add_jobs(seen)
        kinds = {job: [a["signature_id"] for a in ledger(job)["anomalies"]] for job in (hang, crash)}
        result.notes.append(f"detected after the flush: {kinds[hang]} (hang job), {kinds[crash]} (crash job)")
    finally:
        restore(env)
        result.seconds = time.monotonic() - started
        result.write()
    result.assert_clean()
    assert ledger(hang)["anomalies"][0]["kind"] == "hang", kinds
    assert kinds[crash] == ["segfault"], f"the crash should be explained by its log line, not just by Slurm: {kinds}"
