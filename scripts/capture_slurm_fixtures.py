"""Capture what a real Slurm cluster prints, as fixtures for the parsing tests (`make fixtures`).

    python scripts/capture_slurm_fixtures.py OUT_DIR

Run against a stack that is up (`source $RELAUNCH_RUN_DIR/env` first): it submits a set of jobs
that end every way relaunch must read (completed, failed with an exit code, killed by a signal,
cancelled, requeued in held state, excluded from a node, pending on a constraint it can never meet,
restarted after a failure, named and commented with text that looks like Slurm's own fields), waits
until each is where it should be, and writes what `squeue --json`, `squeue --json --states=all`, each
job's own `squeue --json --states=all --jobs=J` object (show-job.json: what the actuator's observe()
reads), `scontrol show job -o` (for comparison only: relaunch no longer reads that text), `sacct` and
`sinfo` say of them into OUT_DIR, with `jobs.json` naming which job is which. Nothing here is edited by
hand: the tests read Slurm's own words (docs/slurm-versions.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SACCT_WANTED = ("JobIDRaw", "JobName", "State", "ExitCode", "Submit", "End", "NodeList", "Partition", "Restarts",
                "StdOut", "StdErr", "WorkDir", "User", "UID", "GID", "SubmitLine", "Comment")
"""A broad set; each release prints the ones it has (sacct --helpformat), Comment last."""
DELIMITER = "\x1f"

SCRIPTS = {
    "ok": "echo '[train] step 1'; exit 0",
    "fail": "echo '[train] step 1'; echo \"ModuleNotFoundError: No module named 'foo'\" >&2; exit 1",
    "sigkill": "echo '[train] step 1'; kill -9 $$",
    "running": "sleep 600",
    "held": "sleep 600",
    "excluded": "sleep 600",
    "released": "sleep 600",
    "cancelled": "sleep 600",
    "badconstraints": "sleep 600",
    # Fails on each of its first two attempts (exit 2, then 3), so accounting holds a chain.
    "chain": "echo \"attempt ${SLURM_RESTART_COUNT:-0}\"; exit $(( ${SLURM_RESTART_COUNT:-0} + 2 ))",
    "comment": "exit 0",
    "crafted": "echo '[train] step 1'; exit 0",
}
CRAFTED_NAME = "x Requeue=0 Restarts=zz"
"""A name and a comment that `scontrol show job -o` prints unquoted where Slurm's own Requeue,
Restarts and StdOut fields follow (docs/slurm-versions.md)."""
CRAFTED_COMMENT = "relaunch StdOut=/etc/shadow"


def run(*argv: str, check: bool = True) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {out.stderr.strip()}")
    return out.stdout


def show(job_id: str) -> dict[str, str]:
    line = run("scontrol", "show", "job", "-o", job_id).strip()
    fields = {}
    for token in line.split(" "):
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields


def listed_job(squeue_json: str, job_id: str) -> dict:
    """The job's own object in a listing (22.05's squeue --json ignores --jobs and lists every job)."""
    return next(j for j in json.loads(squeue_json)["jobs"] if str(j["job_id"]) == job_id)


def wait(what: str, predicate, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.3)
    raise SystemExit(f"timed out waiting for {what}")


def state(job_id: str) -> str:
    return show(job_id).get("JobState", "")


def submit(name: str, jobs_dir: Path, *extra: str, comment: str = "relaunch", job_name: str = "") -> str:
    script = jobs_dir / f"{name}.sh"
    script.write_text(f"#!/bin/bash\n{SCRIPTS[name]}\n")
    out = run("sbatch", "--parsable", "-J", job_name or name, f"--comment={comment}", "--open-mode=append",
              "-o", str(jobs_dir / "%x-%j.out"), *extra, str(script))
    return out.strip().split(";")[0]


def requeue_held_and_pending(job_id: str) -> None:
    wait(f"job {job_id} RUNNING", lambda: state(job_id) == "RUNNING")
    run("scontrol", "requeuehold", job_id)
    wait(f"job {job_id} PENDING", lambda: state(job_id) == "PENDING")


def main() -> None:
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs_dir = Path(os.environ["RELAUNCH_RUN_DIR"]) / "jobs" / "fixtures"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    version = run("scontrol", "--version").strip()
    print(f"capturing from {version} into {out_dir}", flush=True)

    ids = {name: submit(name, jobs_dir) for name in ("ok", "running", "held", "excluded", "released", "cancelled")}
    ids["fail"] = submit("fail", jobs_dir, "-e", str(jobs_dir / "%x-%j.err"))
    ids["sigkill"] = submit("sigkill", jobs_dir)
    ids["comment"] = submit("comment", jobs_dir, comment="relaunch:max_attempts=2 owner=a|b;x")
    ids["chain"] = submit("chain", jobs_dir)
    ids["crafted"] = submit("crafted", jobs_dir, comment=CRAFTED_COMMENT, job_name=CRAFTED_NAME)
    ids["badconstraints"] = submit("badconstraints", jobs_dir, "-N2", "-w", "node3,node4")

    requeue_held_and_pending(ids["held"])
    requeue_held_and_pending(ids["excluded"])
    run("scontrol", "update", f"JobId={ids['excluded']}", "ExcNodeList=node1")
    requeue_held_and_pending(ids["released"])
    run("scontrol", "release", ids["released"])  # eligible only after Slurm's requeue delay
    wait("cancelled RUNNING", lambda: state(ids["cancelled"]) == "RUNNING")
    run("scancel", ids["cancelled"])
    # A successor that requires a node it may not use: Slurm never starts it.
    requeue_held_and_pending(ids["badconstraints"])
    run("scontrol", "update", f"JobId={ids['badconstraints']}", "ExcNodeList=node4")
    run("scontrol", "release", ids["badconstraints"])
    run("scontrol", "update", f"JobId={ids['badconstraints']}", "StartTime=now")
    # The chain: the first failure waits 8 s before its requeue (longer than relaunch's link between
    # an attempt's End and the next Submit), as a held or slow recovery would.
    wait("chain FAILED", lambda: state(ids["chain"]) == "FAILED")
    time.sleep(8)
    run("scontrol", "requeuehold", ids["chain"])
    wait("chain PENDING", lambda: state(ids["chain"]) == "PENDING")
    run("scontrol", "release", ids["chain"])
    run("scontrol", "update", f"JobId={ids['chain']}", "StartTime=now")
    wait("chain failed again", lambda: show(ids["chain"]).get("Restarts") == "1" and state(ids["chain"]) == "FAILED")
    for name in ("ok", "fail", "sigkill", "comment", "crafted"):
        wait(f"{name} finished", lambda n=name: state(ids[n]) in ("COMPLETED", "FAILED"))
    time.sleep(3)  # accounting records reach slurmdbd a moment after the controller

    (out_dir / "version.txt").write_text(version + "\n")
    (out_dir / "jobs.json").write_text(json.dumps(ids, indent=1, sort_keys=True) + "\n")
    (out_dir / "squeue.json").write_text(run("squeue", "--json"))
    (out_dir / "squeue-all.json").write_text(run("squeue", "--json", "--states=all"))
    scontrol = {name: run("scontrol", "show", "job", "-o", job_id).strip() for name, job_id in sorted(ids.items())}
    (out_dir / "scontrol.json").write_text(json.dumps(scontrol, indent=1, sort_keys=True) + "\n")
    shown = {name: listed_job(run("squeue", "--json", "--states=all", f"--jobs={job_id}"), job_id)
             for name, job_id in sorted(ids.items())}
    (out_dir / "show-job.json").write_text(json.dumps(shown, indent=1, sort_keys=True) + "\n")
    available = set(run("sacct", "--helpformat").split())
    fields = [f for f in SACCT_WANTED if f in available]
    (out_dir / "sacct.fields").write_text(",".join(fields) + "\n")
    (out_dir / "sacct.txt").write_text(run(
        "sacct", "-X", "-D", "-P", "-n", f"--delimiter={DELIMITER}", "-j", ",".join(sorted(ids.values())),
        f"--format={','.join(fields)}"))
    (out_dir / "sinfo-partitions.txt").write_text(run("sinfo", "-h", "-N", "-o", "%R|%N|%t"))
    (out_dir / "sinfo-nodes.txt").write_text(run("sinfo", "-h", "-N", "-o", "%N|%T|%E"))
    for job_id in ids.values():
        run("scancel", job_id, check=False)
    print(f"wrote {len(list(out_dir.iterdir()))} files to {out_dir}")


if __name__ == "__main__":
    main()
