"""Load: 10,000 monitored jobs reporting progress at 1 Hz, then 1,000 simultaneous failures (a failed
switch), through the detector and the decider, on a running infrastructure (scripts/stack.sh
infra-up; no relaunch services of that stack may run: this script starts its own detector and
decider, and no actuator, so nothing touches Slurm; the jobs exist only on the bus).

Phases, each printed as it runs:
  track     JobObserved(RUNNING) for every job; both consumers (detector, decider) drained.
  steady    progress at --rate-hz per job (ProgressReported published to JetStream, acknowledged),
            for --duration s; the detector's rate and num_pending are sampled every second. The bare
            nats-py consumer is paused (SIGSTOP) until the drain phase, as it would not run beside a
            real detector (--bare-during-load runs it here too, taking a core's share from the others).
  failures  while the other jobs keep reporting, --failures jobs print an InfiniBand error and Slurm
            reports them FAILED; the time from the first failure to each Advice is measured.
  drain     both consumers are paused (SIGSTOP), a backlog of --drain-msgs progress messages is
            published, both are resumed together: each one's ingest rate, side by side.
Memory: the detector's RSS and Redis' used_memory before and after tracking, per tracked job.

    RELAUNCH_RUN_DIR=.run/bench-load python bench/load.py [--jobs 10000] [--duration 60]
Writes bench/results/load-<time>.json and .md (and load-latest.*); exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import multiprocessing as mp

import nats
import nats.js.errors
from redis import asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen  # noqa: E402

from relaunch.common import subjects  # noqa: E402
from relaunch.common.streams import ensure_streams  # noqa: E402
from relaunch.common.schemas import dump  # noqa: E402
from load_phases import LoadPhases  # noqa: E402
from load_report import TARGET_ADVICE_S, TARGET_BYTES_PER_JOB, TARGET_RATIO_PER_CPU_S, markdown  # noqa: E402
from measure import CpuMeter, code, load_env, machine, metric, pid_of, postgres_pid, rss_bytes, say  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


class LoadRun(LoadPhases):
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.run_dir = Path(args.run_dir).resolve()
        self.env = load_env(self.run_dir)
        self.url, self.cluster = self.env["RELAUNCH_NATS_URL"], self.env.get("RELAUNCH_CLUSTER", "local")
        base = int(self.env.get("RELAUNCH_PORT_BASE", "14000"))
        self.detector_port, self.decider_port = base + 91, base + 92
        self.nonce = 1000 + int(time.time()) % 9000
        self.nats_opts = loadgen.nats_options(self.run_dir)
        self.jobs = loadgen.make_jobs(args.jobs, self.nonce)
        self.failed = self.jobs[: args.failures]
        self.result: dict = {"machine": machine(), "code": code(), "args": vars(args), "nonce": self.nonce,
                             "phases": {}}
        self.procs: dict[str, subprocess.Popen] = {}
        self.advice_at: dict[str, float] = {}
        self.anomaly_at: dict[str, float] = {}
        self.outbox_lag: dict[str, float] = {}
        """job -> seconds from the decision (Advice.issued_at) to the Advice reaching the bench."""

    def log_file(self, job: loadgen.Job) -> str:
        """The job's (empty) log file, which the detector's follower watches, as it would a real job's."""
        if self.args.no_log_files:
            return ""
        path = self.run_dir / "jobs" / "load" / f"{job.job_id}.out"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        return str(path)

    # services ----------------------------------------------------------------------------------
    def start_service(self, name: str, port: int) -> None:
        env = {**os.environ, **self.env, f"RELAUNCH_{name.upper()}_HEALTH_PORT": str(port)}
        if name == "detector":
            # The bench stops the jobs' progress between phases: with the 10 s default floor every job
            # would be declared hung then, and the decider would be busy with those instead.
            env["RELAUNCH_DETECTOR_HANG_FLOOR_S"] = str(self.args.hang_floor_s)
            # The bench's jobs exist only on the bus (no log prints a progress key): reports unbound.
            env["RELAUNCH_DETECTOR_PROGRESS_KEYS"] = "off"
        for key in ("RELAUNCH_NATS_USER", "RELAUNCH_NATS_PASSWORD_FILE"):
            env.pop(key, None)
        if self.nats_opts:  # each service as its own NATS user, as scripts/stack.sh starts it
            env["RELAUNCH_NATS_USER"] = name
            env["RELAUNCH_NATS_PASSWORD_FILE"] = str(self.run_dir / "creds" / f"{name}.pass")
        log = open(self.run_dir / "log" / f"bench-load-{name}.log", "ab")
        profile = ["-m", "cProfile", "-o", self.args.profile_detector] if name == "detector" and \
            self.args.profile_detector else []
        self.procs[name] = subprocess.Popen([sys.executable, *profile, "-m", f"relaunch.{name}"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, name: str, port: int, timeout_s: float = 60) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.procs[name].poll() is not None:
                break  # it exited: no use waiting
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                return
            except OSError:
                time.sleep(0.2)
        log = self.run_dir / "log" / f"bench-load-{name}.log"
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
        exited = self.procs[name].poll()
        raise SystemExit(f"the {name} {'exited with ' + str(exited) if exited is not None else 'did not become healthy'}"
                         f" (health port {port}); the end of {log}:\n" + "\n".join(tail))

    def stop_services(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()

    # bus ---------------------------------------------------------------------------------------
    async def consumer(self, durable: str) -> dict:
        info = await self.js.consumer_info(subjects.SIGNALS.name, durable)
        return {"num_pending": info.num_pending, "ack_pending": info.num_ack_pending,
                "redelivered": info.num_redelivered}

    async def drained(self, durables: list[str], timeout_s: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            states = [await self.consumer(d) for d in durables]
            if all(s["num_pending"] == 0 and s["ack_pending"] == 0 for s in states):
                return time.monotonic() - t0
            await asyncio.sleep(0.5)
        raise SystemExit(f"consumers {durables} not drained within {timeout_s}s: {states}")

    def detector_handled(self) -> float:
        return metric(self.detector_port, "relaunch_messages_consumed_total",
                      {"consumer": subjects.DETECTOR_PROGRESS.durable})

    async def _on_advice(self, msg) -> None:
        job = msg.subject.rsplit(".", 1)[1]
        if job not in self.advice_at:
            self.advice_at[job] = time.monotonic()
            issued = dt.datetime.fromisoformat(json.loads(msg.data)["issued_at"])
            self.outbox_lag[job] = (dt.datetime.now(dt.UTC) - issued).total_seconds()

    async def _on_anomaly(self, msg) -> None:
        self.anomaly_at.setdefault(msg.subject.rsplit(".", 1)[1], time.monotonic())

    async def forget_jobs(self) -> None:
        """Take this run's jobs out of the detector's hot state, so that a stack left running does not go
        on following them and, once their progress stopped, declare them all hung."""
        c = self.cluster
        for start in range(0, len(self.jobs), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for job in self.jobs[start: start + 1000]:
                pipe.delete(f"rl:job:{c}:{job.job_id}", f"rl:prog:{c}:{job.job_id}", f"rl:progd:{c}:{job.job_id}")
                pipe.srem(f"rl:follow:{c}", job.job_id)
                pipe.zrem(f"rl:hangdl:{c}", job.job_id)
            await pipe.execute()

    async def redis_memory(self) -> int:
        return int((await self.redis.info("memory"))["used_memory"])

    # phases ------------------------------------------------------------------------------------
    async def setup(self) -> None:
        for name in ("detector", "decider", "actuator"):
            if pid_of(self.run_dir, name):
                raise SystemExit(f"the stack in {self.run_dir} runs its own {name}; stop its services first "
                                 f"(RELAUNCH_RUN_DIR={self.run_dir} scripts/stack.sh services-down)")
        loadgen.check_progress_body(self.cluster)
        self.nc = await nats.connect(self.url, name="bench-load", **self.nats_opts)
        self.js = self.nc.jetstream()
        await ensure_streams(self.js, "bench-load")  # when no service has made them yet
        self.redis = aioredis.from_url(self.env["RELAUNCH_REDIS_URL"])
        if not self.args.keep_streams:  # a fresh SIGNALS/EVENTS/ADVICE and hot state: the bench's own stack
            for stream in (subjects.SIGNALS, subjects.EVENTS, subjects.ADVICE):
                await self.js.purge_stream(stream.name)
            await self.redis.flushdb()  # earlier runs' jobs would otherwise be followed and swept
        try:
            await self.js.delete_consumer(subjects.SIGNALS.name, loadgen.BARE_DURABLE)
        except nats.js.errors.NotFoundError:
            pass
        await self.nc.subscribe(subjects.ALL_ADVICE, cb=self._on_advice, pending_msgs_limit=1_000_000)
        await self.nc.subscribe(subjects.ALL_ANOMALIES, cb=self._on_anomaly, pending_msgs_limit=1_000_000)
        self.start_service("detector", self.detector_port)
        self.start_service("decider", self.decider_port)
        self.wait_healthy("detector", self.detector_port)
        self.wait_healthy("decider", self.decider_port)
        # The services bind their durables on start; let them do so before anything is published.
        await self.drained([subjects.DETECTOR_JOBS.durable, subjects.DECIDER_JOBS.durable], 30)
        ctx = mp.get_context("spawn")
        self.ctl = loadgen.PublisherControl(ctx)
        self.bare_handled, self.bare_ready, self.bare_quit = ctx.Value("q", 0, lock=False), ctx.Event(), ctx.Event()
        self.bare = loadgen.spawn(loadgen.bare_main, self.url, self.nats_opts, self.args.bare_batch, self.bare_handled,
                                  self.bare_ready, self.bare_quit)
        self.publisher = loadgen.spawn(loadgen.publisher_main, self.url, self.nats_opts, self.cluster,
                                       [j.job_id for j in self.jobs], self.args.rate_hz, self.ctl)
        if not self.bare_ready.wait(30):
            raise SystemExit("the bare consumer did not start")
        if not self.args.bare_during_load:
            os.kill(self.bare.pid, signal.SIGSTOP)  # until the drain phase resumes it
        pids = {"detector": self.procs["detector"].pid, "decider": self.procs["decider"].pid,
                "bare_consumer": self.bare.pid, "publisher": self.publisher.pid, "bench": os.getpid()}
        for name in ("nats", "redis"):
            if pid_of(self.run_dir, name):
                pids[f"{name}-server"] = pid_of(self.run_dir, name)
        postmaster = postgres_pid(self.env["RELAUNCH_DATABASE_URL"])
        if postmaster:
            pids["postgres"] = postmaster
        self.cpu = CpuMeter(pids)
        await asyncio.sleep(2)
        self.rss_idle, self.redis_idle = rss_bytes(self.procs["detector"].pid), await self.redis_memory()
        say(f"detector (pid {self.procs['detector'].pid}) and decider up; detector RSS "
            f"{self.rss_idle / 2**20:.1f} MiB idle; jobs {self.jobs[0].job_id}..{self.jobs[-1].job_id}")

    async def track(self) -> None:
        say(f"track: publishing JobObserved(RUNNING) for {len(self.jobs)} jobs")
        self.cpu.reset()
        t0 = time.monotonic()
        pub = await loadgen.AckedPublisher(self.nc).start()
        for job in self.jobs:
            body = dump(loadgen.observed(self.cluster, job, "RUNNING", stdout=self.log_file(job)))
            await pub.publish(subjects.signal_job(self.cluster, job.job_id), body)
        await pub.settle()
        published_s = time.monotonic() - t0
        last = time.monotonic()
        while True:
            states = {d: await self.consumer(d) for d in (subjects.DETECTOR_JOBS.durable,
                                                           subjects.DECIDER_JOBS.durable)}
            if all(s["num_pending"] == 0 and s["ack_pending"] == 0 for s in states.values()):
                break
            if time.monotonic() - last > 5:
                say("track: pending " + ", ".join(f"{d} {s['num_pending'] + s['ack_pending']}"
                                                  for d, s in states.items()))
                last = time.monotonic()
            if time.monotonic() - t0 > self.args.track_timeout:
                raise SystemExit(f"JobObserved not consumed within {self.args.track_timeout}s: {states}")
            await asyncio.sleep(0.5)
        took = time.monotonic() - t0
        self.rss_tracked, self.redis_tracked = rss_bytes(self.procs["detector"].pid), await self.redis_memory()
        phase = {"jobs": len(self.jobs), "published_s": round(published_s, 2), "consumed_by_both_s": round(took, 2),
                 "observations_per_s": round(len(self.jobs) / took, 1), "cpu_cores": self.cpu.read()}
        self.result["phases"]["track"] = phase
        say(f"track: {len(self.jobs)} jobs tracked by detector and decider in {took:.1f}s "
            f"({phase['observations_per_s']}/s); cpu {phase['cpu_cores']}")

    async def sample_loop(self, seconds: float, label: str, samples: list, extra=None) -> None:
        prev_t, prev_det, prev_bare, prev_pub = time.monotonic(), self.detector_handled(), self.bare_handled.value, \
            self.ctl.stored.value
        end = prev_t + seconds
        while time.monotonic() < end and (extra is None or not extra()):
            await asyncio.sleep(1.0)
            now = time.monotonic()
            det, bare, pub = self.detector_handled(), self.bare_handled.value, self.ctl.stored.value
            dt_s = now - prev_t
            det_c, bare_c = await self.consumer(subjects.DETECTOR_PROGRESS.durable), \
                await self.consumer(loadgen.BARE_DURABLE)
            sample = {"t": round(now - self.t_start, 1), "phase": label,
                      "stored_per_s": round((pub - prev_pub) / dt_s), "detector_per_s": round((det - prev_det) / dt_s),
                      "bare_per_s": round((bare - prev_bare) / dt_s),
                      "detector_pending": det_c["num_pending"] + det_c["ack_pending"],
                      "bare_pending": bare_c["num_pending"] + bare_c["ack_pending"],
                      "detector_rss_mib": round(rss_bytes(self.procs["detector"].pid) / 2**20, 1)}
            samples.append(sample)
            print(f"  t={sample['t']:6.1f}s {label:8s} stored {sample['stored_per_s']:6d}/s | detector "
                  f"{sample['detector_per_s']:6d}/s pending {sample['detector_pending']:7d} | bare "
                  f"{sample['bare_per_s']:6d}/s pending {sample['bare_pending']:7d} | detector RSS "
                  f"{sample['detector_rss_mib']} MiB", flush=True)
            prev_t, prev_det, prev_bare, prev_pub = now, det, bare, pub

    async def run(self) -> dict:
        self.t_start = time.monotonic()
        samples: list[dict] = []
        try:
            await self.setup()
            await self.track()
            await self.steady(samples)
            await self.failures(samples)
            await self.drain(samples)
        finally:
            self.ctl_quit()
            self.stop_services()
            if hasattr(self, "redis"):
                await self.forget_jobs()
        jobs = len(self.jobs)
        per_job = (self.rss_steady - self.rss_idle) / jobs
        self.result["memory"] = {
            "detector_vs_target": round(per_job / TARGET_BYTES_PER_JOB, 2),
            "detector_rss_idle_mib": round(self.rss_idle / 2**20, 1),
            "detector_rss_tracked_mib": round(self.rss_tracked / 2**20, 1),
            "detector_rss_after_steady_mib": round(self.rss_steady / 2**20, 1),
            "detector_bytes_per_tracked_job": round((self.rss_steady - self.rss_idle) / jobs),
            "detector_bytes_per_tracked_job_after_track": round((self.rss_tracked - self.rss_idle) / jobs),
            "redis_bytes_per_tracked_job": round((self.redis_tracked - self.redis_idle) / jobs),
            "redis_bytes_per_job_after_steady": round((self.redis_steady - self.redis_idle) / jobs),
        }
        self.result["samples"] = samples
        self.result["machine"]["loadavg_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
        steady, fail, drain = (self.result["phases"][k] for k in ("steady", "failures", "drain"))
        self.result["targets"] = {
            "ingest_keeps_up_at_offered_rate": steady["keeps_up"] and steady["stored_per_s"] >= 0.95 *
            steady["offered_per_s"],
            "all_advice_within_5s": fail["last_advice_s"] is not None and fail["last_advice_s"] <= TARGET_ADVICE_S,
            "detector_per_cpu_s_at_least_bare": drain["detector_vs_bare_per_cpu_s"] is not None and
            drain["detector_vs_bare_per_cpu_s"] >= TARGET_RATIO_PER_CPU_S,
            "detector_memory_per_job_within_5kb": per_job <= TARGET_BYTES_PER_JOB,
        }
        return self.result

    def ctl_quit(self) -> None:
        if hasattr(self, "ctl"):
            self.ctl.quit.set()
            self.bare_quit.set()
            for proc in (self.publisher, self.bare):
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGCONT)
                proc.join(15)
                if proc.is_alive():
                    proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", default=os.environ.get("RELAUNCH_RUN_DIR", str(REPO / ".run")),
                    help="the stack's run folder (its env file names the servers)")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--failures", type=int, help="jobs that fail at once (default: a tenth of --jobs)")
    ap.add_argument("--rate-hz", type=float, default=1.0, help="progress reports per job per second")
    ap.add_argument("--duration", type=float, default=120.0,
                    help="seconds of steady progress before the failures (by 100 s every job's state is full-size: "
                         "100 hang intervals, 45 straggler samples)")
    ap.add_argument("--drain-msgs", type=int, default=0, help="backlog for the side-by-side drain (default: "
                                                              "10 s of the offered rate)")
    ap.add_argument("--bare-batch", type=int, default=16, help="fetch batch of the bare consumer")
    ap.add_argument("--bare-during-load", action="store_true",
                    help="run the bare consumer in the steady and failure phases too, not only in the drain")
    ap.add_argument("--advice-timeout", type=float, default=60.0)
    ap.add_argument("--track-timeout", type=float, default=300.0)
    ap.add_argument("--no-log-files", action="store_true", help="give the jobs no log files to follow")
    ap.add_argument("--hang-floor-s", type=float, default=600.0,
                    help="the detector's hang floor during the bench (it pauses the jobs' progress)")
    ap.add_argument("--keep-streams", action="store_true", help="do not purge SIGNALS/EVENTS/ADVICE first")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--profile-detector", metavar="FILE", help="run the detector under cProfile, stats to FILE")
    args = ap.parse_args()
    if args.failures is None:
        args.failures = max(args.jobs // 10, 1)
    if args.failures >= args.jobs:
        ap.error("--failures must be below --jobs: the jobs that do not fail keep reporting (the drain phase's backlog)")
    if not args.drain_msgs:
        args.drain_msgs = int(args.jobs * args.rate_hz * 10)
    result = asyncio.run(LoadRun(args).run())
    result["finished_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"load-{result['finished_at'].replace(':', '')}"
    text = markdown(result)
    for name in (stem, "load-latest"):
        (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / f"{name}.md").write_text(text)
    print(text)
    say(f"results: {out / stem}.json and .md")
    sys.exit(0 if all(result["targets"].values()) else 1)


if __name__ == "__main__":
    main()
