"""Failure line -> running again on every Slurm release of the matrix, with Slurm's default scheduling
cadence and with batch_sched_delay=0, each run side by side with a native `scontrol requeue`
(bench/recovery_latency.py --baseline). One stack per release under .run/bench-restart-<release>
(ports 16xxx), started for each setting and stopped afterwards. Writes bench/results/restart-matrix.json
and .md; exits 1 when a run did not complete.

    python bench/restart_matrix.py [--releases "22.05 24.11 26.05"] [--settings default,batch_sched_delay=0]
    make bench-restart

Why two settings: once relaunch has set StartTime=now, the successor starts at slurmctld's next
scheduling pass, which comes no sooner than batch_sched_delay (default 3 s) after the previous one
(docs/architecture.md, "Slurm's own floor"); the failed attempt's own end usually triggered that
previous pass. With batch_sched_delay=0 the pass comes at slurmctld's next background tick (about a
second). What relaunch itself spends is the same in both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PORT_BASE = "16000"


def stack(env: dict, *args: str) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), *args], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def one(release: str, setting: str, jobs: int, parallel: int) -> dict:
    run = REPO / ".run" / f"bench-restart-{release}"
    env = {**os.environ, "RELAUNCH_RUN_DIR": str(run), "RELAUNCH_PORT_BASE": PORT_BASE, "RELAUNCH_SLURM": release,
           "RELAUNCH_SLURM_SCHEDULER_PARAMETERS": "" if setting == "default" else setting}
    env.pop("RELAUNCH_SLURM_API", None)
    stack(env, "down")
    print(f"[bench-restart] Slurm {release}, SchedulerParameters {setting}: stack up", file=sys.stderr, flush=True)
    stack(env, "up")
    try:
        bench = f"source {run}/env && exec {sys.executable} {REPO}/bench/recovery_latency.py"
        # One recovery first, on the fresh stack, reported beside the figures and not in them: the first
        # observer polls after a start look every job up and sweep accounting, and a decision waits for
        # the attempt's nodes until the observer has reported them (the steady state is measured).
        warm = subprocess.run(["bash", "-c", f"{bench} --jobs 1 --parallel 1"], capture_output=True, text=True,
                              env=env, timeout=300)
        warmup = json.loads(warm.stdout).get("failure_to_running_s") if warm.stdout.strip() else None
        started = time.monotonic()
        out = subprocess.run(["bash", "-c", f"{bench} --jobs {jobs} --parallel {parallel} --baseline"],
                             capture_output=True, text=True, env=env, timeout=900)
        sys.stderr.write(out.stderr)
        result = json.loads(out.stdout) if out.stdout.strip() else {"error": out.stderr[-2000:]}
        result["setting"] = setting
        result["first_recovery_on_a_fresh_stack_s"] = warmup["median"] if warmup else None
        result["seconds"] = round(time.monotonic() - started, 1)
        return result
    finally:
        stack(env, "down")


def table(results: list[dict]) -> str:
    rows = ["| Slurm | SchedulerParameters | failure -> running median | p95 | vs target (1.4 s / 2 s) | "
            "native requeue | speed-up (median) | met | first recovery on a fresh stack |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        run = r.get("failure_to_running_s")
        if not run:
            rows.append(f"| {r.get('slurm', '?')} | {r['setting']} | did not run: {r.get('error', '')[:80]} |||||")
            continue
        target = r["restart_target"]
        base = r.get("baseline_plain_requeue_s")
        rows.append(f"| {r['slurm']} | {r['scheduler_parameters'] or '(default: batch_sched_delay=3)'} | "
                    f"{run['median']:.2f} s | {run['p95']:.2f} s | {target['ratios']['median']:.2f}x / "
                    f"{target['ratios']['p95']:.2f}x | {f'{base:.0f} s' if base else '-'} | "
                    f"{r.get('speedup_median_vs_plain_requeue', '-')}x | {'yes' if target['met'] else 'no'} | "
                    f"{_seconds(r.get('first_recovery_on_a_fresh_stack_s'))} |")
    return "\n".join(rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", default=os.environ.get("SLURM_RELEASES", "22.05 24.11 26.05"))
    ap.add_argument("--settings", default="default,batch_sched_delay=0")
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=4)
    args = ap.parse_args()
    results = [one(release, setting, args.jobs, args.parallel)
               for release in args.releases.split() for setting in args.settings.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "restart-matrix.json").write_text(json.dumps(results, indent=1) + "\n")
    text = (f"# Failure line -> running again, by Slurm release ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n"
            f"`python bench/restart_matrix.py` ({args.jobs} one-node recoveries per row, {args.parallel} at a "
            "time, and one job requeued natively beside them; each row after one recovery on the fresh stack, "
            "shown in the last column and not counted)\n\n" + table(results) + "\n")
    (RESULTS / "restart-matrix.md").write_text(text)
    print(text)
    sys.exit(1 if any(r.get("not_completed") or not r.get("failure_to_running_s") for r in results) else 0)


if __name__ == "__main__":
    main()
