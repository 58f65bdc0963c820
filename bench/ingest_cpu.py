"""The detector's progress ingest in process: CPU seconds per message of the detector's own path
(consume_batch, ProgressTracker and ProgressHistory, as detector/main.py wires them, against the
stack's NATS and Redis), beside a bare nats-py consumer (fetch 16, ack: bench/loadgen.py's) draining
the same messages, and the same for other checkouts (--variant), alternating in rounds.

A load bench's drain (bench/load.py) runs both side by side on a 2-core machine that others share, and
its ratio moves by 0.1 from run to run; here each consumer runs alone and only its own process' CPU
time counts, so a change of a few percent in the detector's cost shows. Every job's state is brought
to full windows first (--warm reports each, not measured).

    RELAUNCH_RUN_DIR=.run/bench-load bash scripts/stack.sh infra-up    # (no relaunch services)
    python bench/ingest_cpu.py --run-dir .run/bench-load [--jobs 2000] [--warm 110] [--msgs 100000]
        [--rounds 3] [--variant before=/path/to/other/checkout] [--engine-only | --tracker-only]

--engine-only and --tracker-only split the detector's cost in two: the ingest engine with a handler that
does nothing, and the handler alone (ProgressTracker and ProgressHistory fed the same reports a batch
of 512 at a time, against Redis, with no NATS: the figure moves far less from round to round).

Prints one line per measurement and a summary (median per variant: messages per CPU-second, and that
against the bare consumer of the same round; the share of each one's CPU spent in the kernel; Redis' own
CPU per message, where the detector's scripts run); --json FILE writes them. No relaunch service of the
stack may run meanwhile (this drains their durables' stream).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from measure import load_env  # noqa: E402 - the stack's RELAUNCH_* settings, as bench/load.py reads them


def say(text: str) -> None:
    print(f"[ingest-cpu {time.strftime('%H:%M:%S')}] {text}", flush=True)


def source_path(checkout: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted(checkout.glob("libs/*/src")) + sorted(checkout.glob("services/*/src")))


# -- the worker (one consumer, one process) ----------------------------------------------------------

BARE_DURABLE = "bench-ingest-cpu-bare"


async def _publish(nc, cluster: str, jobs: list[str], first_step: int, steps: int, base: float) -> int:
    import loadgen
    from relaunch.common import subjects

    pub = await loadgen.AckedPublisher(nc).start()
    for step in range(first_step, first_step + steps):
        at = dt.datetime.fromtimestamp(base + step, dt.UTC).isoformat().replace("+00:00", "Z")
        for job in jobs:
            await pub.publish(subjects.signal_progress(cluster, job), loadgen.progress_body(cluster, job, step, at))
    await pub.settle(120)
    if pub.errors:
        raise SystemExit(f"{pub.errors} progress messages were not stored")
    return pub.sent


async def _reset(js) -> None:
    """An empty progress stream and no durable on it."""
    import nats.js.errors

    from relaunch.common import subjects

    spec = subjects.DETECTOR_PROGRESS
    for durable in (spec.durable, BARE_DURABLE):
        try:
            await js.delete_consumer(spec.stream.name, durable)
        except nats.js.errors.NotFoundError:
            pass
    await js.purge_stream(spec.stream.name, subject=spec.filter_subject)


def _split(before: os.times_result, after: os.times_result) -> dict:
    """The CPU seconds in user space and in the kernel: whether a difference between machines is in what
    system calls cost (the bare consumer makes one per acknowledgement) or in the work around them."""
    return {"user_s": after.user - before.user, "sys_s": after.system - before.system}


async def _redis_cpu(raw) -> float:
    """Redis' own CPU seconds so far (its scripts run there: a cost of the detector's ingest on a machine
    it shares with Redis; no one else uses the stack's Redis meanwhile)."""
    info = await raw.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _detector_handler(bus, redis_url: str, cluster: str, args: argparse.Namespace):
    """The detector's progress handler as detector/main.py wires it (HotState, ProgressTracker,
    ProgressHistory), with every job of the run tracked on attempt 1; the GC as the service sets it."""
    import gc

    from relaunch.detector.adapters.hotstate import HotState
    from relaunch.detector.adapters.progress_store import ProgressStore
    from relaunch.detector.domain import hangs, stragglers
    from relaunch.detector.main import GC_THRESHOLDS
    from relaunch.detector.history_recorder import ProgressHistory
    from relaunch.detector.tracking import ProgressTracker

    gc.set_threshold(*GC_THRESHOLDS)
    state = HotState(redis_url)
    jobs = [str(args.first_job + i) for i in range(args.jobs)]
    for job in jobs:
        await state.track(cluster, job, {"attempt": "1", "progress_seen": "1", "options": ""})
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(floor_s=600.0), stragglers.StragglerPolicy(),
                              cache_jobs=max(20_000, args.jobs))
    return jobs, state, tracker, ProgressHistory(ProgressStore(redis_url), cluster)


async def tracker_worker(args: argparse.Namespace) -> dict:
    """The detector's handler alone: every job's windows filled (--warm reports), then --msgs reports fed
    to ProgressTracker.on_progress_batch and ProgressHistory.on_reports in batches of 512, made first."""
    from redis import asyncio as aioredis

    import gc

    from relaunch.common.connection import Bus
    from relaunch.common.outcomes import Delivery
    from relaunch.common.schemas import ProgressReported

    env = load_env(Path(args.run_dir).resolve())
    cluster, redis_url = env.get("RELAUNCH_CLUSTER", "local"), env["RELAUNCH_REDIS_URL"]
    raw = aioredis.from_url(redis_url)
    await raw.flushdb()
    bus = await Bus.connect(env["RELAUNCH_NATS_URL"], "detector")  # (anomalies would leave through it)
    jobs, state, tracker, history = await _detector_handler(bus, redis_url, cluster, args)
    base, delivery = time.time() - 3600, Delivery("bench", 1, 1)

    def reports(step: int) -> list:
        at = dt.datetime.fromtimestamp(base + step, dt.UTC)
        return [(ProgressReported(cluster=cluster, job_id=job, step=step, throughput=1000.0 + step % 7,
                                  step_time_s=0.5, at=at), delivery) for job in jobs]

    async def feed(items: list) -> None:
        for i in range(0, len(items), 512):
            batch = items[i:i + 512]
            results = await tracker.on_progress_batch(batch)
            await history.on_reports([item for item, result in zip(batch, results) if result is None])

    for step in range(1, args.warm + 1):
        await feed(reports(step))
    measured = [item for step in range(args.warm + 1, args.warm + 1 + args.msgs // args.jobs)
                for item in reports(step)]
    gc.collect()
    redis0 = await _redis_cpu(raw)
    cpu0, wall0, times0 = time.process_time(), time.monotonic(), os.times()
    await feed(measured)
    cpu, wall, times = time.process_time() - cpu0, time.monotonic() - wall0, os.times()
    redis_cpu = await _redis_cpu(raw) - redis0
    await bus.close()
    await state.close()
    await history.store.close()
    await raw.aclose()
    return {"messages": len(measured), "cpu_s": cpu, "wall_s": wall, **_split(times0, times), "redis_cpu_s": redis_cpu}


async def detector_worker(args: argparse.Namespace) -> dict:
    if args.tracker_only:
        return await tracker_worker(args)
    import nats
    from redis import asyncio as aioredis

    import loadgen
    from relaunch.common import consumers
    from relaunch.common.connection import Bus
    from relaunch.common.ingest import consume_batch
    import gc

    run = Path(args.run_dir).resolve()
    env = load_env(run)
    cluster, redis_url = env.get("RELAUNCH_CLUSTER", "local"), env["RELAUNCH_REDIS_URL"]
    admin = await nats.connect(env["RELAUNCH_NATS_URL"], **loadgen.nats_options(run))
    js = admin.jetstream()
    await _reset(js)
    raw = aioredis.from_url(redis_url)
    await raw.flushdb()
    bus = await Bus.connect(env["RELAUNCH_NATS_URL"], "detector")
    jobs, state, tracker, history = await _detector_handler(bus, redis_url, cluster, args)
    handled = 0
    done = asyncio.Event()
    target = 0

    async def on_progress_batch(items):
        nonlocal handled
        if args.engine_only:
            results = [None] * len(items)
        else:
            results = await tracker.on_progress_batch(items)
            await history.on_reports([item for item, result in zip(items, results) if result is None])
        handled += len(items)
        if handled >= target:
            done.set()
        return results

    active = False
    stop = asyncio.Event()
    task = asyncio.create_task(consume_batch(bus, consumers.DETECTOR_PROGRESS, on_progress_batch, stop,
                                             active=lambda: active, concurrency=3))
    base = time.time() - 3600
    if args.warm and not args.engine_only:
        target = await _publish(admin, cluster, jobs, 1, args.warm, base)
        active = True
        await asyncio.wait_for(done.wait(), 600)  # the warm-up: every job's windows full
        active, done = False, asyncio.Event()
        await asyncio.sleep(0.5)
    handled = 0
    target = await _publish(admin, cluster, jobs, 1 + args.warm, args.msgs // args.jobs, base)
    gc.collect()
    redis0 = await _redis_cpu(raw)
    cpu0, wall0, times0 = time.process_time(), time.monotonic(), os.times()
    active = True
    await asyncio.wait_for(done.wait(), 600)
    cpu, wall, times = time.process_time() - cpu0, time.monotonic() - wall0, os.times()
    redis_cpu = await _redis_cpu(raw) - redis0
    stop.set()
    await task
    await bus.close()
    await state.close()
    await history.store.close()
    await raw.aclose()
    await admin.close()
    return {"messages": handled, "cpu_s": cpu, "wall_s": wall, **_split(times0, times), "redis_cpu_s": redis_cpu}


async def bare_worker(args: argparse.Namespace) -> dict:
    """bench/loadgen.py's bare consumer (fetch, ack, nothing else) over the same number of messages."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    import loadgen
    from relaunch.common import subjects

    run = Path(args.run_dir).resolve()
    env = load_env(run)
    cluster = env.get("RELAUNCH_CLUSTER", "local")
    nc = await nats.connect(env["RELAUNCH_NATS_URL"], **loadgen.nats_options(run))
    js = nc.jetstream()
    await _reset(js)
    jobs = [str(args.first_job + i) for i in range(args.jobs)]
    total = await _publish(nc, cluster, jobs, 1, args.msgs // args.jobs, time.time() - 3600)
    spec = subjects.DETECTOR_PROGRESS
    await js.add_consumer(spec.stream.name, ConsumerConfig(
        durable_name=BARE_DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        ack_wait=spec.ack_wait_s, max_deliver=spec.max_deliver, filter_subject=spec.filter_subject))
    sub = await js.pull_subscribe_bind(BARE_DURABLE, stream=spec.stream.name)
    handled = 0
    cpu0, wall0, times0 = time.process_time(), time.monotonic(), os.times()
    while handled < total:
        try:
            msgs = await sub.fetch(args.bare_batch, timeout=0.5)
        except (nats.errors.TimeoutError, TimeoutError):
            continue
        for msg in msgs:
            await msg.ack()
        handled += len(msgs)
    cpu, wall, times = time.process_time() - cpu0, time.monotonic() - wall0, os.times()
    await js.delete_consumer(spec.stream.name, BARE_DURABLE)
    await nc.close()
    return {"messages": handled, "cpu_s": cpu, "wall_s": wall, **_split(times0, times)}


# -- the rounds ------------------------------------------------------------------------------------------

def _kernel(got: dict) -> str:
    return f"{100 * got['sys_s'] / max(got['cpu_s'], 1e-9):.0f}% of it in the kernel"


def worker_env(run_dir: str, pythonpath: str, nats_user: str) -> dict[str, str]:
    """A worker's environment: the stack's settings, the checkout's sources first on the path, and the
    stack's NATS user `nats_user` when the stack has users (its password file)."""
    env = {**os.environ, **load_env(Path(run_dir).resolve()), "PYTHONPATH": pythonpath}
    for key in ("RELAUNCH_NATS_USER", "RELAUNCH_NATS_PASSWORD_FILE"):
        env.pop(key, None)
    creds = Path(run_dir).resolve() / "creds" / f"{nats_user}.pass"
    if creds.exists():
        env["RELAUNCH_NATS_USER"], env["RELAUNCH_NATS_PASSWORD_FILE"] = nats_user, str(creds)
    return env


def checkouts(items: list[str]) -> dict[str, str]:
    """--variant NAME=CHECKOUT items as name -> PYTHONPATH, after "this" (this checkout)."""
    variants = {"this": source_path(REPO)}
    for item in items:
        name, _, checkout = item.partition("=")
        if not checkout or not Path(checkout, "services").is_dir():
            raise SystemExit(f"--variant {item!r}: NAME=CHECKOUT, a relaunch checkout (with services/)")
        variants[name] = source_path(Path(checkout).resolve())
    return variants


def measure(args: argparse.Namespace, role: str, pythonpath: str) -> dict:
    env = worker_env(args.run_dir, pythonpath, "detector")
    cmd = [sys.executable, __file__, "--worker", role, "--run-dir", args.run_dir, "--jobs", str(args.jobs),
           "--warm", str(args.warm), "--msgs", str(args.msgs), "--bare-batch", str(args.bare_batch),
           "--first-job", str(args.first_job)] + (["--engine-only"] if args.engine_only else []) \
        + (["--tracker-only"] if args.tracker_only else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{role} worker failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", default=os.environ.get("RELAUNCH_RUN_DIR", str(REPO / ".run" / "bench-load")))
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--warm", type=int, default=110, help="reports per job before the measurement (full windows)")
    ap.add_argument("--msgs", type=int, default=100_000, help="messages measured per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bare-batch", type=int, default=16)
    ap.add_argument("--first-job", type=int, default=7_000_000)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=CHECKOUT",
                    help="another checkout measured in each round beside this one")
    ap.add_argument("--engine-only", action="store_true",
                    help="the detector's ingest engine alone: its handler does nothing (consume_batch's own cost)")
    ap.add_argument("--tracker-only", action="store_true",
                    help="the detector's handler alone (tracker and history, against Redis, no NATS): its own cost")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--worker", choices=("detector", "bare"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine_only and args.tracker_only:
        raise SystemExit("--engine-only and --tracker-only measure the two halves: one at a time")
    if args.worker:
        result = asyncio.run(detector_worker(args) if args.worker == "detector" else bare_worker(args))
        print(json.dumps(result))
        return
    variants = checkouts(args.variant)
    rows, bare_rows = [], []
    for rnd in range(1, args.rounds + 1):
        bare = measure(args, "bare", variants["this"])
        bare_rate = bare["messages"] / bare["cpu_s"]
        say(f"round {rnd}: bare {bare_rate:,.0f} msgs per CPU-second ({bare['cpu_s']:.2f} s, {_kernel(bare)})")
        bare_rows.append({"round": rnd, **bare, "per_cpu_s": bare_rate})
        names = list(variants) if rnd % 2 else list(reversed(variants))  # each goes first in turn
        for name in names:
            got = measure(args, "detector", variants[name])
            rate = got["messages"] / got["cpu_s"]
            rows.append({"round": rnd, "variant": name, **got, "per_cpu_s": rate, "bare_per_cpu_s": bare_rate,
                         "ratio": rate / bare_rate})
            say(f"round {rnd}: {name:>8} {rate:,.0f} msgs per CPU-second ({got['cpu_s']:.2f} s for "
                f"{got['messages']}, {_kernel(got)}; Redis {1e6 * got['redis_cpu_s'] / got['messages']:.1f} us a "
                f"message), {rate / bare_rate:.3f} x the bare consumer")
    summary = {}
    for name in variants:
        mine = [r for r in rows if r["variant"] == name]
        summary[name] = {"median_per_cpu_s": round(statistics.median(r["per_cpu_s"] for r in mine)),
                         "median_ratio_vs_bare": round(statistics.median(r["ratio"] for r in mine), 3),
                         "median_us_per_msg": round(1e6 / statistics.median(r["per_cpu_s"] for r in mine), 1),
                         "median_kernel_share": round(statistics.median(r["sys_s"] / r["cpu_s"] for r in mine), 2),
                         "median_redis_us_per_msg": round(statistics.median(1e6 * r["redis_cpu_s"] / r["messages"]
                                                                            for r in mine), 1)}
        say(f"{name}: median {summary[name]['median_per_cpu_s']:,} msgs per CPU-second "
            f"({summary[name]['median_us_per_msg']} us a message; Redis {summary[name]['median_redis_us_per_msg']} us "
            f"a message), {summary[name]['median_ratio_vs_bare']} x the bare consumer")
    summary["bare"] = {"median_per_cpu_s": round(statistics.median(r["per_cpu_s"] for r in bare_rows)),
                       "median_kernel_share": round(statistics.median(r["sys_s"] / r["cpu_s"] for r in bare_rows), 2)}
    say(f"bare: median {summary['bare']['median_per_cpu_s']:,} msgs per CPU-second; in the kernel: bare "
        f"{summary['bare']['median_kernel_share']:.0%}, " +
        ", ".join(f"{name} {summary[name]['median_kernel_share']:.0%}" for name in variants))
    if len(variants) > 1:
        for name in variants:
            if name != "this":
                say(f"this / {name}: {summary['this']['median_per_cpu_s'] / summary[name]['median_per_cpu_s']:.3f} "
                    "(messages per CPU-second)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "bare": bare_rows, "summary": summary},
                                              indent=1))


if __name__ == "__main__":
    main()
