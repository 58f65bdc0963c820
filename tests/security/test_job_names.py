"""Attack: crafted job names (issue 35, item 4). A job named `x Requeue=0` or `x Restarts=zz` (and a comment
carrying the same words) fails with `--comment=relaunch`. Read from `scontrol show job -o` text, the name's
words shadowed Slurm's own fields: `Requeue=0` made the actuator abandon the restart as "not requeueable",
`Restarts=zz` made it fail on a ValueError at every look, forever.

Proves the threat model's line "a user who submits jobs ... may never cause: changing a field relaunch reads
with a name or comment" (docs/security.md, "Threat model"): each job is restarted once as usual and
completes, its Advice converges (never ABANDONED, no reconcile loop), and the actuator's log has no
traceback from it."""

from __future__ import annotations

import time

import pytest
from attacks import run_dir, submit, wait_ledger, wait_state

pytestmark = pytest.mark.e2e

NAMES = ["x Requeue=0", "x Restarts=zz", "x JobState=COMPLETED Requeue=0"]
COMMENT = "relaunch Requeue=0 Restarts=zz ExitCode=0:0"


def test_a_name_or_comment_that_looks_like_slurm_fields_is_read_as_text(services):
    env = services
    log = run_dir(env) / "log" / "actuator.log"
    seen = log.stat().st_size if log.exists() else 0
    started = time.monotonic()
    jobs = {name: submit(env, "flaky-train.sh", "relaunch", name=name, STEP_SECONDS="0.2") for name in NAMES}
    jobs["(comment)"] = submit(env, "flaky-train.sh", COMMENT, name="crafted-comment", STEP_SECONDS="0.2")
    for what, job in jobs.items():
        done = wait_state(job, ("COMPLETED", "FAILED", "CANCELLED"), restarts=1)
        assert done["state"] == "COMPLETED", (what, done["state"], done.get("state_reason"))
        record = wait_ledger(env, job, "the Advice converged",
                             lambda r: any(a["status"] in ("CONVERGED", "ABANDONED") for a in r.get("advice", [])))
        (advice,) = record["advice"]
        assert advice["operation"] == "restart" and advice["status"] == "CONVERGED", (what, advice)
        assert len(advice["reconcile"]) < 40, (what, "the actuator looped", advice["reconcile"])
        assert record["job"]["name"] == (what if what != "(comment)" else "crafted-comment"), record["job"]
    text = log.read_bytes()[seen:].decode(errors="replace")
    assert "Traceback" not in text and "ValueError" not in text, text[-4000:]
    print(f"job names: {len(jobs)} crafted jobs restarted once, in {time.monotonic() - started:.0f} s")
