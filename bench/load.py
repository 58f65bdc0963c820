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
import platform
import signal
import statistics
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

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TARGET_ADVICE_S = 5.0
"""Every one of the simultaneous failures has its Advice within this many seconds of the first."""
TARGET_RATIO_PER_CPU_S = 1.0
"""The detector ingests at least as many progress messages per CPU-second as the bare nats-py consumer."""
TARGET_BYTES_PER_JOB = 5 * 1024
"""The detector's RSS grows by at most this much per tracked job (5 KB), windows full."""


def say(text: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {text}", flush=True)


# -- the machine and its processes ---------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_ticks(pid: int, kernel_only: bool = False) -> int:
    """CPU ticks of a process (user and system; `kernel_only`: system alone); for Postgres' postmaster,
    of it and its backends."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = int(fields[12]) if kernel_only else int(fields[11]) + int(fields[12])
    except (OSError, IndexError):
        return 0
    if pid == POSTMASTER["pid"]:
        own += sum(cpu_ticks(child) for child in _children(pid))
    return own


POSTMASTER = {"pid": None}


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def postgres_pid(database_url: str) -> int | None:
    """The postmaster listening on the ledger's port (backends' CPU is counted with it)."""
    port = database_url.rsplit(":", 1)[1].split("/", 1)[0]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"postgres") and f"-p {port}".encode() in b" ".join(args):
            POSTMASTER["pid"] = int(cmdline.parent.name)
            return POSTMASTER["pid"]
    return None


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal"))
    return {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem / 2**20, 1),
            "python": platform.python_version(), "kernel": platform.release(),
            "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3]}


def code() -> dict:
    """The relaunch code measured: the checkout the detector's package is imported from (PYTHONPATH may
    point at another one, as for a run of an earlier commit beside this one) and its commit."""
    import relaunch.detector

    here = Path(relaunch.detector.__file__).resolve()
    root = next((p for p in here.parents if (p / ".git").exists()), here.parent)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"checkout": str(root), "commit": commit, "uncommitted_changes": dirty}


class CpuMeter:
    """CPU used per process (in cores) between two readings, and by the whole machine."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids, self.hz = pids, os.sysconf("SC_CLK_TCK")
        self.reset()

    def reset(self) -> None:
        self.t0, self.ticks0, self.machine0 = time.monotonic(), {n: cpu_ticks(p) for n, p in self.pids.items()}, \
            machine_busy()

    def read(self) -> dict:
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        out = {n: round((cpu_ticks(p) - self.ticks0[n]) / self.hz / elapsed, 2) for n, p in self.pids.items()}
        busy, total = machine_busy()
        out["machine_busy_cores"] = round((busy - self.machine0[0]) / max(total - self.machine0[1], 1)
                                          * (os.cpu_count() or 1), 2)
        out["others"] = round(out["machine_busy_cores"] - sum(v for k, v in out.items()
                                                              if k != "machine_busy_cores"), 2)
        return out


def pid_of(run: Path, name: str) -> int | None:
    try:
        pid = int((run / "pids" / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def load_env(run: Path) -> dict[str, str]:
    env = {}
    for line in (run / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export "):].split("=", 1)
            if key.startswith("RELAUNCH_") or key == "SLURM_CONF":
                env[key] = value
    return env


def metric(port: int, name: str, labels: dict[str, str]) -> float:
    """Sum of a Prometheus counter over the series that carry `labels`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# -- the run ---------------------------------------------------------------------------------------

class LoadRun:
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

    async def steady(self, samples: list) -> None:
        offered = len(self.jobs) * self.args.rate_hz
        say(f"steady: offering {offered:.0f} progress msgs/s ({len(self.jobs)} jobs at {self.args.rate_hz} Hz) "
            f"for {self.args.duration}s")
        self.cpu.reset()
        pub0, behind0 = self.ctl.stored.value, self.ctl.behind.value
        det0, bare0, t0 = self.detector_handled(), self.bare_handled.value, time.monotonic()
        self.ctl.steady.set()
        await self.sample_loop(self.args.duration, "steady", samples)
        elapsed = time.monotonic() - t0
        cpu = self.cpu.read()
        window = [s for s in samples if s["phase"] == "steady"]
        second_half = window[len(window) // 2:]
        growth = _slope([(s["t"], s["detector_pending"]) for s in second_half])
        phase = {"offered_per_s": offered,
                 "stored_per_s": round((self.ctl.stored.value - pub0) / elapsed),
                 "publisher_gave_up": self.ctl.behind.value - behind0,
                 "detector_per_s": round((self.detector_handled() - det0) / elapsed),
                 "bare_per_s": round((self.bare_handled.value - bare0) / elapsed),
                 "detector_pending_end": window[-1]["detector_pending"] if window else None,
                 "detector_pending_max": max((s["detector_pending"] for s in window), default=None),
                 "detector_pending_growth_per_s_second_half": round(growth, 1),
                 "cpu_cores": cpu}
        # Keeping up: the backlog does not grow (under 1% of the stored rate per second) and ends
        # under two seconds' worth of messages.
        phase["keeps_up"] = bool(window) and growth < 0.01 * max(phase["stored_per_s"], 1) and \
            phase["detector_pending_end"] < 2 * max(phase["stored_per_s"], 1)
        self.result["phases"]["steady"] = phase
        self.rss_steady, self.redis_steady = rss_bytes(self.procs["detector"].pid), await self.redis_memory()
        say(f"steady: stored {phase['stored_per_s']}/s of {offered:.0f}/s offered; detector "
            f"{phase['detector_per_s']}/s, bare {phase['bare_per_s']}/s; detector pending end "
            f"{phase['detector_pending_end']}, growth {phase['detector_pending_growth_per_s_second_half']}/s; "
            f"keeps up: {phase['keeps_up']}; cpu {cpu}")

    async def failures(self, samples: list) -> None:
        say(f"failures: {len(self.failed)} jobs behind one switch fail at once (IB error line, then Slurm FAILED)")
        self.cpu.reset()
        self.ctl.skip_first.value = len(self.failed)
        pub = await loadgen.AckedPublisher(self.nc).start()
        t0 = time.monotonic()
        for job in self.failed:
            body = dump(loadgen.ib_failure(self.cluster, job))
            await pub.publish(subjects.signal_log(self.cluster, job.job_id), body)
        for job in self.failed:
            body = dump(loadgen.observed(self.cluster, job, "FAILED", exit_code=1, stdout=self.log_file(job)))
            await pub.publish(subjects.signal_job(self.cluster, job.job_id), body)
        await pub.settle()
        published_s = time.monotonic() - t0
        wanted = {j.job_id for j in self.failed}

        def all_advised() -> bool:
            return wanted <= self.advice_at.keys()

        await self.sample_loop(self.args.advice_timeout, "failures", samples, extra=all_advised)
        got = sorted(self.advice_at[j] - t0 for j in wanted if j in self.advice_at)
        anomalies = sorted(self.anomaly_at[j] - t0 for j in wanted if j in self.anomaly_at)
        phase = {"failures": len(self.failed), "published_s": round(published_s, 2), "advice": len(got),
                 "anomalies": len(anomalies),
                 "first_anomaly_s": _r(anomalies[0] if anomalies else None),
                 "last_anomaly_s": _r(anomalies[-1] if anomalies else None),
                 "first_advice_s": _r(got[0] if got else None), "median_advice_s": _r(statistics.median(got) if got
                                                                                      else None),
                 "last_advice_s": _r(got[-1] if len(got) == len(wanted) else None),
                 "advice_within_target": sum(1 for g in got if g <= TARGET_ADVICE_S),
                 "decision_to_advice_received_s": {
                     "median": _r(statistics.median(lags)) if (lags := sorted(self.outbox_lag[j] for j in wanted
                                                                            if j in self.outbox_lag)) else None,
                     "max": _r(lags[-1]) if lags else None},
                 "cpu_cores": self.cpu.read()}
        self.result["phases"]["failures"] = phase
        say(f"failures: {phase['anomalies']} anomalies (last at {phase['last_anomaly_s']}s), {phase['advice']} Advice "
            f"(first {phase['first_advice_s']}s, median {phase['median_advice_s']}s, last {phase['last_advice_s']}s); "
            f"{phase['advice_within_target']} within {TARGET_ADVICE_S:.0f}s; decision -> Advice received "
            f"{phase['decision_to_advice_received_s']}")

    async def drain(self, samples: list) -> None:
        n = self.args.drain_msgs
        say(f"drain: pausing both consumers, publishing a backlog of {n} progress messages")
        self.ctl.steady.clear()
        await asyncio.sleep(1)
        for pid in (self.procs["detector"].pid, self.bare.pid):
            os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(1.0)  # pull requests made before the pause expire (0.5 s) and take nothing
            # What either consumer has not taken yet is dropped, so that both start from an empty
            # consumer (the detector may still be behind from the steady phase).
            await self.js.purge_stream(subjects.SIGNALS.name, subject=subjects.ALL_SIGNAL_PROGRESS)
            self.ctl.burst_done.clear()
            self.ctl.burst.value = n
            while not self.ctl.burst_done.is_set():
                if not self.publisher.is_alive():
                    raise SystemExit(f"the publisher process died (exit {self.publisher.exitcode}); see its traceback above")
                await asyncio.sleep(0.2)
        finally:
            self.cpu.reset()
            t0 = time.monotonic()
            for pid in (self.procs["detector"].pid, self.bare.pid):
                os.kill(pid, signal.SIGCONT)
        done: dict[str, float] = {}
        pids = {"bare": self.bare.pid, "detector": self.procs["detector"].pid}
        ticks0 = {k: cpu_ticks(pid) for k, pid in pids.items()}
        kernel0 = {k: cpu_ticks(pid, kernel_only=True) for k, pid in pids.items()}
        cpu_s: dict[str, float] = {}
        kernel_s: dict[str, float] = {}

        durables = {"bare": loadgen.BARE_DURABLE, "detector": subjects.DETECTOR_PROGRESS.durable}

        async def finished() -> bool:
            # Each consumer is done when its durable holds nothing pending or unacknowledged, as the
            # server says: the same question for both, and one the consumers pay nothing for (scraping
            # the detector's /metrics 20 times a second had cost it about 0.02 cores, its own figure's
            # share of a 4% that the bare consumer's shared counter did not cost it).
            for name, durable in durables.items():
                if name in done:
                    continue
                left = await self.consumer(durable)
                if left["num_pending"] == 0 and left["ack_pending"] == 0:
                    done[name] = time.monotonic() - t0
                    cpu_s[name] = (cpu_ticks(pids[name]) - ticks0[name]) / os.sysconf("SC_CLK_TCK")
                    kernel_s[name] = (cpu_ticks(pids[name], kernel_only=True) - kernel0[name]) / os.sysconf("SC_CLK_TCK")
            return len(done) == 2

        async def watch() -> None:  # finer than the 1 s samples: the bare consumer drains fast
            while not await finished() and time.monotonic() - t0 < self.args.track_timeout:
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch())
        while not watcher.done():
            await self.sample_loop(1.0, "drain", samples, extra=watcher.done)
        cpu = self.cpu.read()
        rates = {k: round(n / v) for k, v in done.items()}
        per_cpu_s = {k: round(n / v) for k, v in cpu_s.items() if v > 0}
        phase = {"backlog": n, "seconds": {k: round(v, 2) for k, v in done.items()}, "per_s": rates,
                 "detector_vs_bare": round(rates["detector"] / rates["bare"], 2) if len(rates) == 2 else None,
                 "cpu_s": {k: round(v, 2) for k, v in cpu_s.items()}, "per_cpu_s": per_cpu_s,
                 # (whether machines differ in what system calls cost: a bare consumer makes one per ack)
                 "kernel_share": {k: round(kernel_s[k] / v, 2) for k, v in cpu_s.items() if v > 0},
                 "detector_vs_bare_per_cpu_s": round(per_cpu_s["detector"] / per_cpu_s["bare"], 2)
                 if len(per_cpu_s) == 2 else None,
                 "cpu_cores": cpu}
        self.result["phases"]["drain"] = phase
        say(f"drain: detector {rates.get('detector')}/s, bare {rates.get('bare')}/s side by side: ratio "
            f"{phase['detector_vs_bare']}; per CPU-second: detector {per_cpu_s.get('detector')}, bare "
            f"{per_cpu_s.get('bare')}, ratio {phase['detector_vs_bare_per_cpu_s']} (in the kernel: "
            f"{phase['kernel_share']}); cpu {cpu}")

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


def _code_line(code: dict) -> str:
    commit = code.get("commit") or "unknown commit"
    changed = " with uncommitted changes" if code.get("uncommitted_changes") else ""
    return f"{commit}{changed} ({code.get('checkout', '?')})"


def _shares(shares: dict) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in shares.items()) or "not measured"


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 with fewer than two points)."""
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def markdown(result: dict) -> str:
    m, p, mem, t = result["machine"], result["phases"], result["memory"], result["targets"]
    s, f, d, tr = p["steady"], p["failures"], p["drain"], p["track"]
    ok = {True: "met", False: "**NOT met**"}
    return "\n".join([
        f"# Load bench ({result['finished_at']})", "",
        f"`python bench/load.py --jobs {result['args']['jobs']} --failures {result['args']['failures']} "
        f"--duration {result['args']['duration']} --rate-hz {result['args']['rate_hz']}`", "",
        f"Machine: {m['cpus']} x {m['cpu_model']}, {m['memory_gib']} GiB, Python {m['python']}; load average "
        f"{' '.join(m['loadavg_at_start'])} at start, {' '.join(m['loadavg_at_end'])} at end. NATS, Redis, "
        "Postgres, the publisher, the bare consumer, the detector and the decider all share these cores "
        "(the CPU columns show who used what; `others` is everything else on the machine). " +
        ("The bare consumer ran in every phase." if result["args"].get("bare_during_load") else
         "The bare consumer ran only in the drain phase (paused before)."), "",
        f"Code: {_code_line(result.get('code') or {})}.", "",
        "| target | measured | |", "|---|---|---|",
        f"| ingest keeps up at {s['offered_per_s']:.0f} msgs/s offered | stored {s['stored_per_s']}/s, detector "
        f"{s['detector_per_s']}/s, pending at end {s['detector_pending_end']}, growth "
        f"{s['detector_pending_growth_per_s_second_half']}/s | {ok[t['ingest_keeps_up_at_offered_rate']]} |",
        f"| all {f['failures']} Advice within {TARGET_ADVICE_S:.0f} s | {f['advice']} Advice, last at {f['last_advice_s']} s "
        f"(median {f['median_advice_s']} s; anomalies last at {f['last_anomaly_s']} s) | "
        f"{ok[t['all_advice_within_5s']]} |",
        f"| detector ingest per CPU-second >= {TARGET_RATIO_PER_CPU_S:g} x bare nats-py (side by side, "
        f"{d['backlog']} backlog) | per CPU-second: detector {d['per_cpu_s'].get('detector')}, bare "
        f"{d['per_cpu_s'].get('bare')}: **{d['detector_vs_bare_per_cpu_s']} x the bare consumer** (wall clock: "
        f"detector {d['per_s'].get('detector')}/s, bare {d['per_s'].get('bare')}/s, ratio {d['detector_vs_bare']}; "
        f"share of the CPU in the kernel: {_shares(d.get('kernel_share') or {})}) | "
        f"{ok[t['detector_per_cpu_s_at_least_bare']]} |",
        f"| detector memory <= {TARGET_BYTES_PER_JOB // 1024} KB per tracked job, windows full | RSS "
        f"{mem['detector_bytes_per_tracked_job']} B/job ({mem['detector_rss_idle_mib']} -> "
        f"{mem['detector_rss_after_steady_mib']} MiB): **{mem['detector_vs_target']} x the target** (after tracking, "
        f"before progress: {mem['detector_bytes_per_tracked_job_after_track']} B/job) | "
        f"{ok[t['detector_memory_per_job_within_5kb']]} |",
        f"| Redis memory per tracked job (reported beside it) | {mem['redis_bytes_per_tracked_job']} B/job tracked, "
        f"{mem['redis_bytes_per_job_after_steady']} B/job after the steady phase (progress state and history) | "
        "reported |", "",
        f"Tracking {tr['jobs']} jobs (JobObserved through detector and decider): {tr['consumed_by_both_s']} s "
        f"({tr['observations_per_s']}/s).", "",
        "CPU (cores) per phase:", "",
        "| phase | " + " | ".join(s["cpu_cores"]) + " |", "|---|" + "---|" * len(s["cpu_cores"]),
        *[f"| {name} | " + " | ".join(str(p[name]["cpu_cores"].get(k)) for k in s["cpu_cores"]) + " |"
          for name in ("track", "steady", "failures", "drain")], "",
    ])


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
