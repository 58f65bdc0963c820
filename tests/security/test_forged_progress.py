"""Attack: forged progress for another user's job (issue 35, item 2). Every training process of every user
holds the shared `cli` NATS user; with it, an attacker publishes ProgressReported for root's running job on
`relaunch.signal.progress.<cluster>.<job>`: losses 2.0, 2.0, then NaN four times (what divergence detection
stops a job for), once without a key and once with a made-up key.

Proves the threat model's line "training code ... may never cause: progress for another user's job (refused,
counted, dead-lettered)" (docs/security.md, "Threat model"; "Progress is bound to its job"): the job keeps
running (no terminate Advice, not CANCELLED in accounting), relaunch_progress_refused_total grows for both
reasons and each forged report lands in the DLQ with its reason. The positive control: the job's own
relaunch.client reports (whose key it printed in its own log) are accepted, and the NaN losses it then
reports do stop it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import secrets
import time
import uuid

import pytest
from attacks import (DETECTOR, VENV_BIN, cancel, dead_letters, last_seq, metric, run_dir, sacct_states, show,
                     squeue_job, submit, wait_ledger, wait_state)
from slurmjobs import wait_until

from relaunch.common import natsauth, subjects
from relaunch.common.schemas import ProgressReported, dump

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=18)]

LOSSES = [2.0, 2.0, math.nan, math.nan, math.nan, math.nan]


async def forge(env: dict, job: str, key: str | None, first_step: int) -> None:
    """What any training process can do: publish reports for `job` as the `cli` user."""
    import nats

    cli = natsauth.CLI
    nc = await nats.connect(env["RELAUNCH_NATS_URL"], user=cli, inbox_prefix=natsauth.inbox_prefix(cli),
                            password=natsauth.read_password(run_dir(env) / "creds" / f"{cli}.pass"))
    try:
        for i, loss in enumerate(LOSSES):
            report = ProgressReported(cluster=env["RELAUNCH_CLUSTER"], job_id=job, step=first_step + i,
                                      throughput=100.0, step_time_s=0.5, loss=loss, at=dt.datetime.now(dt.UTC),
                                      key=key)
            await nc.publish(subjects.signal_progress(env["RELAUNCH_CLUSTER"], job), dump(report))
        await nc.flush()
    finally:
        await nc.close()


def refused(env: dict, reason: str) -> float:
    return metric(env, DETECTOR, "relaunch_progress_refused_total", f'reason="{reason}"')


def forged_step(entry: dict) -> int:
    """The step of the report a DLQ entry holds (-1 when its payload is not a whole report)."""
    try:
        return int(json.loads(entry["payload"])["step"])
    except (ValueError, KeyError, TypeError):
        return -1


def terminated(record: dict) -> bool:
    return any(a["operation"] == "terminate" for a in record.get("advice", []))


def test_forged_nan_losses_for_another_user_s_job_are_refused_and_its_own_are_not(services, bus):
    env, tag = services, uuid.uuid4().hex[:8]
    trigger = run_dir(env) / "jobs" / f"nan-{tag}"
    started = time.monotonic()
    job = submit(env, "reporting-train.sh", "relaunch", STEP_SECONDS="0.5", NAN_WHEN=str(trigger),
                 RELAUNCH_TEST_PYTHON=str(VENV_BIN / "python"), RELAUNCH_NATS_USER=natsauth.CLI,
                 RELAUNCH_NATS_PASSWORD_FILE=str(run_dir(env) / "creds" / f"{natsauth.CLI}.pass"))
    try:
        wait_state(job, ("RUNNING",))
        # The job's own reporter is up: its key line is in its log.
        wait_until("the job's progress key in its log", lambda: any(
            "relaunch: progress key " in p.read_text(errors="replace")
            for p in (run_dir(env) / "jobs").glob(f"*-{job}.out")), 60)
        wait_ledger(env, job, "the job in the ledger", lambda r: r["job"]["state"] == "RUNNING")
        before = {"no key": refused(env, "no key"), "unknown key": refused(env, "unknown key")}
        dlq_seen = last_seq(env, subjects.DLQ.name)

        asyncio.run(forge(env, job, None, 1000))
        asyncio.run(forge(env, job, secrets.token_hex(16), 2000))

        subject = subjects.signal_progress(env["RELAUNCH_CLUSTER"], job)

        def dead_lettered() -> list[dict]:
            # Fails at once, rather than at the timeout, when the forged reports were taken (the job stopped).
            assert squeue_job(job)["state"] == "RUNNING", ("the forged NaN losses stopped the job", squeue_job(job))
            # The forged ones only (steps from 1000): a report of the job's own that came before the follower
            # read its key line may be dead-lettered too on a loaded machine.
            found = [e for e in dead_letters(env, subject, dlq_seen) if forged_step(e) >= 1000]
            return len(found) >= 12 and found

        letters = wait_until("the 12 forged reports dead-lettered", dead_lettered, 90)
        reasons = [entry["reason"] for entry in letters]
        assert sum("no key" in r for r in reasons) == 6, reasons
        assert sum("has not been printed in the job's log" in r for r in reasons) == 6, reasons
        assert refused(env, "no key") >= before["no key"] + 6
        assert refused(env, "unknown key") >= before["unknown key"] + 6
        # Long after the forged NaNs: the job runs on, nothing told the actuator to stop it.
        assert squeue_job(job)["state"] == "RUNNING", squeue_job(job)
        assert "CANCELLED" not in " ".join(sacct_states(job)), sacct_states(job)
        record = show(env, job)
        assert not terminated(record), record["advice"]
        assert not [a for a in record["anomalies"] if a["kind"] == "divergence"], record["anomalies"]

        # Positive control: the job's own reporter now sends NaN losses with its key; relaunch stops the job.
        trigger.touch()
        record = wait_ledger(env, job, "a terminate Advice on the job's own NaN reports", terminated)
        assert [a for a in record["anomalies"] if a["kind"] == "divergence" and a["source"] == "progress"], \
            record["anomalies"]
        wait_state(job, ("CANCELLED",))
        print(f"forged progress: refused, own reports accepted, in {time.monotonic() - started:.0f} s")
    finally:
        if squeue_job(job).get("state") in ("RUNNING", "PENDING"):
            cancel(job)
        trigger.unlink(missing_ok=True)

