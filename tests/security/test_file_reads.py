"""Attack: reading a file through relaunch (issue 35, item 1). An unprivileged user (nobody) points a job's
output at a file only root may read (`sbatch -o`), at a symlink to it in the user's own directory (made
before the job starts, or swapped in for the job's own output while it runs), or names it in the job's
comment (`relaunch StdOut=<path>`, which `scontrol -o` text would have read as the output path).

Proves the threat model's line "a user who submits jobs ... may never cause: reading a file they could not
read themselves; changing a field relaunch reads with a name or comment" (docs/security.md, "Threat model"):
the detector refuses to read (an "output not read" audit entry, relaunch_log_reads_refused_total grows),
the job is not restarted on the file's content (a failure relaunch cannot read the log of stops: rule
log_unread), and the file's content (a canary) is nowhere: not on any NATS subject, not in the DLQ stream,
not in the API's answers with or without the token, not in `relaunch jobs show --json`, not in any log."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest
from attacks import (DETECTOR, NOBODY, assert_nowhere, audit, metric, new_canary, nobody_dir, nobody_ids, plant,
                     run_dir, sacct_states, squeue_job, submit, wait_ledger, wait_state)

pytestmark = pytest.mark.e2e

POLICY = "relaunch:max_attempts=2"


def refused_and_stopped(record: dict) -> bool:
    """The detector's refusal is audited and the decider has decided the failed attempt."""
    return bool(audit(record, "output not read")) and bool(record.get("anomalies")) and (
        record["job"]["verdict"] == "stopped" or bool(record.get("advice")))


def test_nobody_s_jobs_really_run_as_nobody(services):
    """The premise of the attacks below: slurmd (root) starts the job as nobody, so nobody's own output is
    written and read as usual. (If this fails, the release's slurmd cannot setuid and the attacks below
    prove nothing.)"""
    env, tag = services, uuid.uuid4().hex[:8]
    home = nobody_dir(env, tag)
    job = submit(env, "flaky-train.sh", "relaunch:max_attempts=1", user=NOBODY, workdir=home, STEP_SECONDS="0.1",
                 FAIL_ATTEMPTS="0")
    wait_state(job, ("COMPLETED",))
    (out,) = home.glob(f"*-{job}.out")
    assert out.stat().st_uid == nobody_ids()[0], (out, out.stat())
    assert "[train] finished" in out.read_text()
    record = wait_ledger(env, job, "known", lambda r: r["job"]["user_id"] is not None)
    assert record["job"]["user_id"] == nobody_ids()[0] and not audit(record, "output not read"), record


def test_a_file_only_root_may_read_is_never_read_as_a_job_s_output(services, bus):
    env, tag = services, uuid.uuid4().hex[:8]
    canary = new_canary()
    home = nobody_dir(env, tag)
    # Root-only files holding the canary: inside the detector's allowed roots (so that only the user's
    # permission can refuse it) and in /root (outside them too).
    in_roots = plant(run_dir(env) / "jobs" / f"secret-{tag}.txt", canary)
    in_root_home = plant(Path("/root") / f"relaunch-secret-{tag}.txt", canary)
    link = home / "out.log"
    link.symlink_to(in_roots)
    os.lchown(link, *nobody_ids())  # nobody's own link, in nobody's own directory
    swapped = home / f"swapped-{tag}.out"
    before = metric(env, DETECTOR, "relaunch_log_reads_refused_total")
    started = time.monotonic()
    try:
        attacks = {  # all at once: each waits on its own job
            "-o a root-only file in the allowed roots":
                submit(env, "flaky-train.sh", POLICY, user=NOBODY, workdir=home, output=str(in_roots)),
            "-o a root-only file in /root":
                submit(env, "flaky-train.sh", POLICY, user=NOBODY, workdir=home, output=str(in_root_home)),
            "-o a symlink in nobody's directory":
                submit(env, "flaky-train.sh", POLICY, user=NOBODY, workdir=home, output=str(link)),
            "output swapped for a symlink while the job runs":
                submit(env, "swap-output.sh", POLICY, user=NOBODY, workdir=home, output=str(swapped),
                       OUTPUT_PATH=str(swapped), LINK_TO=str(in_roots), STEP_SECONDS="2"),
        }
        comment_job = submit(env, "flaky-train.sh", f"relaunch:max_attempts=1 StdOut={in_roots}", user=NOBODY,
                             workdir=home, output=str(home / "real-%j.out"), STEP_SECONDS="0.2",
                             CRASH_LINE="[train] giving up")
        records = {what: wait_ledger(env, job, f"refused and decided ({what})", refused_and_stopped)
                   for what, job in attacks.items()}
        for what, job in attacks.items():
            record = records[what]
            details = [a["detail"] for a in audit(record, "output not read")]
            # Refused for the user's permission, for lying outside the roots, or (the swap caught between the
            # path's resolution and its walk with O_NOFOLLOW, seen on 26.05) for a symlink met on the walk.
            reasons = ("not readable by the job's user", "outside", "symbolic link")
            assert any(r in d for d in details for r in reasons), (what, details)
            # Not restarted on the file's content (its segfault lines): a failure whose log cannot be read stops.
            assert record["job"]["verdict"] == "stopped" and not record["advice"], (what, record["job"],
                                                                                     record["advice"])
            assert [a["category"] for a in record["anomalies"]] == ["log_unread"], (what, record["anomalies"])
            attempts = sacct_states(job)
            assert squeue_job(job).get("restarts") == 0 and "REQUEUED" not in attempts, (what, attempts)
        # The comment is text: the observation's output path is the job's real one, and the detector never
        # even tried the path the comment names.
        comment_record = wait_ledger(env, comment_job, "the failure decided",
                                     lambda r: r["job"]["verdict"] == "stopped")
        observed = [json.loads(b) for b in bus.on(f"relaunch.signal.job.{env['RELAUNCH_CLUSTER']}.{comment_job}")]
        assert observed and {o.get("stdout") for o in observed} == {str(home / f"real-{comment_job}.out")}, observed
        assert not audit(comment_record, "output not read"), comment_record["audit"]
        assert metric(env, DETECTOR, "relaunch_log_reads_refused_total") >= before + len(attacks)
        assert_nowhere(env, bus, canary, [*attacks.values(), comment_job])
        print(f"file reads: {len(attacks) + 1} attacks refused in {time.monotonic() - started:.0f} s")
    finally:
        in_root_home.unlink(missing_ok=True)
