"""bench/load.py's three measured phases after tracking (steady progress, simultaneous failures, a drained
backlog), as a part of its LoadRun (a mixin: the run's state is LoadRun's)."""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen  # noqa: E402

from relaunch.common import subjects  # noqa: E402
from relaunch.common.schemas import dump  # noqa: E402

from load_report import TARGET_ADVICE_S, _r, _slope  # noqa: E402 - bench/ is on the path (load.py puts it there)
from measure import cpu_ticks, rss_bytes, say  # noqa: E402


class LoadPhases:
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
