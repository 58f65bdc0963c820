"""Failure line -> job running again, measured on the running local stack (make up; source .run/env).

Submits N copies of examples/flaky-train.sh (each crashes once) opted in to relaunch, and, with
--baseline, one more copy NOT opted in that this script requeues itself with a plain
`scontrol requeue` the moment it fails: what Slurm offers without relaunch (its 120 s begin-time).
Times come from the jobs' own log lines (date +%s.%N), so they include detection, decision and
reconcile. Prints one JSON object.

    python bench/recovery_latency.py --jobs 12 --parallel 4 [--baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from relaunch.client.narration import recovery_seconds

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "flaky-train.sh"


def submit(comment: str, tag: str) -> tuple[str, Path]:
    out_dir = Path(os.environ.get("RELAUNCH_RUN_DIR", REPO / ".run")) / "jobs" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["sbatch", "--parsable", f"--comment={comment}", "--open-mode=append",
                          "-J", f"bench-{tag}", "-o", str(out_dir / "%x-%j.out"), str(SCRIPT)],
                         check=True, capture_output=True, text=True, env={**os.environ, "STEP_SECONDS": "0.3"})
    job = out.stdout.strip().split(";")[0]
    return job, out_dir / f"bench-{tag}-{job}.out"


def state(job: str) -> tuple[str, int]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    return fields.get("JobState", "?"), int(fields.get("Restarts", "0") or 0)


def run_one(i: int, requeue_myself: bool, timeout: float) -> float | None:
    comment = "bench-baseline" if requeue_myself else "relaunch:max_attempts=2"
    job, log = submit(comment, f"{'base' if requeue_myself else 'rl'}{i}")
    end = time.monotonic() + timeout
    requeued = False
    while time.monotonic() < end:
        st, restarts = state(job)
        if requeue_myself and not requeued and st == "FAILED":
            subprocess.run(["scontrol", "requeue", job], check=True)
            requeued = True
        if st == "COMPLETED" and restarts >= 1:
            return recovery_seconds(log.read_text(errors="replace"))
        time.sleep(0.1)
    print(f"job {job} did not finish within {timeout}s", file=sys.stderr)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--baseline", action="store_true", help="also time one plain `scontrol requeue` (~2 min)")
    args = ap.parse_args()
    with ThreadPoolExecutor(max_workers=args.parallel + 1) as pool:
        base = pool.submit(run_one, 0, True, 300) if args.baseline else None
        times = list(pool.map(lambda i: run_one(i, False, 120), range(args.jobs)))
        baseline = base.result() if base else None
    done = sorted(t for t in times if t is not None)
    result = {
        "jobs": args.jobs, "recovered": len(done),
        "failure_to_running_s": {
            "min": round(done[0], 2), "median": round(statistics.median(done), 2), "max": round(done[-1], 2),
        } if done else None,
        "baseline_plain_requeue_s": round(baseline, 2) if baseline else None,
    }
    if done and baseline:
        result["speedup_median_vs_plain_requeue"] = round(baseline / statistics.median(done), 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
