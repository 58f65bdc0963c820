"""The CPU a failure costs the detector and the decider, in process: the paths of `make bench-load`'s
1,000 simultaneous failures (an InfiniBand error line, then Slurm's FAILED) through each service's own
handlers, against the stack's NATS, Redis and Postgres, and the same for other checkouts (--variant),
alternating in rounds.

The load bench's "all Advice within 5 s" is decided by how much CPU the two services spend per failure
on a machine that is also ingesting 9,000 progress reports a second; its figure moves by seconds from
run to run. Here each stage runs alone, only this process' CPU time counts (user and kernel), and a
change of a tenth shows:

- detector, log crash: `Detector.on_log` of one IB error batch per job (jobs tracked as RUNNING, each
  with a progress state at full windows, as after the load bench's steady phase; a 512-message fetch
  handled at once, as consume_each does);
- detector, FAILED: `Detector.on_job` of the FAILED observation after it (the log read once more);
  in both detector stages the follower runs its passes every 0.1 s, as in the service, over --followed
  jobs (the failing ones and quiet others, as bench/load.py's 10,000);
- decider, anomaly: `Decider.on_anomaly` of the anomaly the detector makes of that line (jobs observed
  RUNNING first; 64 at a time), its Advice published by the outbox;
- decider, FAILED: `Decider.on_job` of the FAILED observation.

FastStream's own per-message work (decoding, middlewares, spans) is not in these figures.

    RELAUNCH_RUN_DIR=.run/bench-load bash scripts/stack.sh infra-up    # (no relaunch services)
    python bench/failure_cpu.py --run-dir .run/bench-load [--jobs 1000] [--rounds 3]
        [--followed 10000] [--variant before=/path/to/other/checkout] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from ingest_cpu import checkouts, worker_env  # noqa: E402 - --variant's checkouts, a worker's environment
from measure import load_env  # noqa: E402 - the stack's RELAUNCH_* settings, as bench/load.py reads them

STAGES = ("detector_log_crash", "detector_failed", "decider_anomaly", "decider_failed")


def say(text: str) -> None:
    print(f"[failure-cpu {time.strftime('%H:%M:%S')}] {text}", flush=True)


async def _chunks(fn, items: list, size: int) -> int:
    """fn over items, `size` at once; returns how many raised (said once)."""
    failed = 0
    for i in range(0, len(items), size):
        got = await asyncio.gather(*(fn(x) for x in items[i:i + size]), return_exceptions=True)
        bad = [g for g in got if isinstance(g, BaseException)]
        if bad and not failed:
            say(f"{len(bad)} raised, e.g. {bad[0]!r:.300}")
        failed += len(bad)
    return failed


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user, t.system


async def detector_worker(args: argparse.Namespace) -> dict:
    import loadgen
    from relaunch.common.connection import Bus
    from relaunch.common.diagnosis.signatures import builtin_catalogue
    from relaunch.common.outcomes import Delivery
    from relaunch.detector.adapters.follower import Follower
    from relaunch.detector.adapters.hotstate import HotState
    from relaunch.detector.domain import hangs, stragglers
    from relaunch.detector.domain.track import ProgressTrack
    from relaunch.detector.handlers import Detector
    from relaunch.detector.tracking import ProgressTracker

    env = load_env(Path(args.run_dir).resolve())
    bus = await Bus.connect(env["RELAUNCH_NATS_URL"], "bench-failure-cpu")
    state = HotState(env["RELAUNCH_REDIS_URL"])
    cluster = env.get("RELAUNCH_CLUSTER", "bench")
    follower = Follower(bus, state, cluster, 0.1, batch_bytes=65536, log_roots=("/",))
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    detector = Detector(bus, state, follower, builtin_catalogue(), grace_s=2.0, tracker=tracker)
    delivery = Delivery("bench", 1, 1)
    everyone = loadgen.make_jobs(max(args.followed, args.jobs), random.randint(100, 999))
    jobs, quiet = everyone[:args.jobs], everyone[args.jobs:]
    out: dict = {}
    stop = asyncio.Event()
    with tempfile.TemporaryDirectory(prefix="bench-failure-") as logs:
        path = {j.job_id: str(Path(logs) / f"{j.job_id}.out") for j in everyone}
        for j in jobs:
            Path(path[j.job_id]).write_text("step 1 | loss 2.0\n")
        for j in quiet:  # followed, their files empty (bench/load.py's jobs print nothing)
            Path(path[j.job_id]).touch()
        await _chunks(lambda j: state.track(cluster, j.job_id, {"attempt": "0", "stdout": path[j.job_id],
                                                                "stderr": path[j.job_id], "state": "RUNNING",
                                                                "uid": str(os.geteuid())}),
                      quiet, 512)
        await _chunks(lambda j: detector.on_job(loadgen.observed(cluster, j, "RUNNING", stdout=path[j.job_id]),
                                                delivery), jobs, 512)
        await follower.pass_once(everything=True)  # every job read once, as after a while in the service
        following = asyncio.create_task(follower.run(stop))
        for j in jobs:  # a progress state at full windows, as after bench/load.py's steady phase
            track = ProgressTrack(0, 1000.0, 101, 46)
            for step in range(1, 130):
                track.observe_report(step, None, 1.0, None, 1000.0 + step, 101, 46)
            await state.save_progress(cluster, j.job_id, track.encode(), None)
        stages = (("detector_log_crash", lambda j: detector.on_log(loadgen.ib_failure(cluster, j), delivery)),
                  ("detector_failed", lambda j: detector.on_job(loadgen.observed(cluster, j, "FAILED", exit_code=1,
                                                                                  stdout=path[j.job_id]), delivery)))
        for name, fn in stages:
            user, system = _cpu()
            failed = await _chunks(fn, jobs, 512)
            user2, system2 = _cpu()
            out[name] = {"user_s": user2 - user, "sys_s": system2 - system, "failed": failed}
        stop.set()
        await following
    await bus.close()
    await state.close()
    return out


async def decider_worker(args: argparse.Namespace) -> dict:
    import datetime as dt

    import loadgen
    from relaunch.common.connection import Bus
    from relaunch.common.diagnosis.signatures import builtin_catalogue
    from relaunch.common.outcomes import Delivery
    from relaunch.decider.adapters.ledger import Ledger
    from relaunch.decider.handlers import Decider
    from relaunch.decider.outbox import OutboxPublisher
    from relaunch.detector.domain.detection import crash_from_log

    env = load_env(Path(args.run_dir).resolve())
    bus = await Bus.connect(env["RELAUNCH_NATS_URL"], "bench-failure-cpu")
    ledger = await Ledger.connect(env["RELAUNCH_DATABASE_URL"])
    await ledger.migrate()
    outbox = OutboxPublisher(bus, ledger, 0.2)
    decider = Decider(ledger, outbox)
    stop = asyncio.Event()
    publishing = asyncio.create_task(outbox.run(stop))
    cluster = env.get("RELAUNCH_CLUSTER", "bench")
    delivery = Delivery("bench", 1, 1)
    jobs = loadgen.make_jobs(args.jobs, random.randint(100, 999))
    await _chunks(lambda j: decider.on_job(loadgen.observed(cluster, j, "RUNNING"), delivery), jobs, 64)
    catalogue, now = builtin_catalogue(), dt.datetime.now(dt.UTC)
    anomaly = {j.job_id: crash_from_log(loadgen.ib_failure(cluster, j), catalogue, list(j.nodes), now)[0] for j in jobs}
    await asyncio.sleep(1.0)  # the RUNNING observations' outbox rows, if any, out of the way
    out: dict = {}
    stages = (("decider_anomaly", lambda j: decider.on_anomaly(anomaly[j.job_id], delivery)),
              ("decider_failed", lambda j: decider.on_job(loadgen.observed(cluster, j, "FAILED", exit_code=1),
                                                          delivery)))
    for name, fn in stages:
        user, system = _cpu()
        failed = await _chunks(fn, jobs, 64)
        if name == "decider_anomaly":  # the Advice and audit entries out of the outbox, counted here
            while await ledger.unpublished(1):
                await asyncio.sleep(0.05)
        user2, system2 = _cpu()
        out[name] = {"user_s": user2 - user, "sys_s": system2 - system, "failed": failed}
    stop.set()
    await publishing
    await bus.close()
    await ledger.close()
    return out


def measure(args: argparse.Namespace, role: str, pythonpath: str) -> dict:
    env = worker_env(args.run_dir, pythonpath, role)  # each service's own NATS user, when the stack has users
    cmd = [sys.executable, __file__, "--worker", role, "--run-dir", args.run_dir, "--jobs", str(args.jobs),
           "--followed", str(args.followed)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"{role} worker failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", default=os.environ.get("RELAUNCH_RUN_DIR", str(REPO / ".run" / "bench-load")))
    ap.add_argument("--jobs", type=int, default=1000, help="simultaneous failures per measurement")
    ap.add_argument("--followed", type=int, default=10_000,
                    help="jobs the detector follows (the failing ones and quiet others), as bench/load.py's")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=CHECKOUT",
                    help="another checkout measured in each round beside this one")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--worker", choices=("detector", "decider"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        result = asyncio.run(detector_worker(args) if args.worker == "detector" else decider_worker(args))
        print(json.dumps(result))
        return
    variants = checkouts(args.variant)
    rows = []
    for rnd in range(1, args.rounds + 1):
        names = list(variants) if rnd % 2 else list(reversed(variants))  # each goes first in turn
        for name in names:
            got = {**measure(args, "detector", variants[name]), **measure(args, "decider", variants[name])}
            rows.append({"round": rnd, "variant": name, **got})
            say(f"round {rnd}: {name:>8} " + ", ".join(
                f"{stage} {1e6 * (got[stage]['user_s'] + got[stage]['sys_s']) / args.jobs:,.0f} us"
                + (f" ({got[stage]['failed']} raised)" if got[stage]["failed"] else "") for stage in STAGES)
                + " of CPU a job")
    summary = {name: {stage: round(statistics.median(1e6 * (r[stage]["user_s"] + r[stage]["sys_s"]) / args.jobs
                                                     for r in rows if r["variant"] == name))
                      for stage in STAGES} for name in variants}
    for name in variants:
        total = sum(summary[name].values())
        summary[name]["total"] = total
        say(f"{name}: medians, us of CPU a failure: " + ", ".join(f"{s} {summary[name][s]:,}" for s in STAGES)
            + f"; together {total:,}")
    for name in variants:
        if name != "this":
            say(f"this / {name}: " + ", ".join(f"{s} {summary['this'][s] / summary[name][s]:.2f}"
                                               for s in (*STAGES, "total")))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
