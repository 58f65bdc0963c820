"""CPU cost of one gpu-probe sample of 8 GPUs: read every field, classify, build and serialise NodeHealth.

Measured with time.process_time (CPU of this process, all threads, kernel time included) over many
samples, for the fake backend and, where a GPU and its driver exist, the real NVML. Target: under 5 ms
of CPU per sample. Prints one JSON object; exits 1 when a measured backend misses the target.

    python bench/probe_overhead.py [--samples 2000] [--gpus 8]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from relaunch.common.schemas import NodeHealth, dump
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.domain.classification import classify
from relaunch.gpu_probe.domain.samples import BackendUnavailable, GpuBackend, XidEvent

TARGET_MS = 5.0


def one_sample(backend: GpuBackend, expected: int, xids: list[XidEvent]) -> bytes:
    """What the probe does per publication, minus the network write."""
    now = dt.datetime.now(dt.UTC)
    sample = backend.sample()
    a = classify(sample, xids, expected, now)
    health = NodeHealth(cluster="bench", node="node1", verdict=a.verdict, reasons=list(a.reasons),
                        notes=list(a.notes), gpus=list(a.gpus), xids=list(a.xids), backend=backend.backend, at=now,
                        gpu_count=sample.gpu_count, expected_gpus=expected, interval_s=10.0, seq=1)
    return dump(health)


def measure(backend: GpuBackend, expected: int, samples: int) -> dict:
    # A realistic history: a few XIDs in the window, so classification does real work.
    now = dt.datetime.now(dt.UTC)
    codes = (13, 13, 63, 31)
    xids = [XidEvent(gpu=g % expected, code=code, at=now) for g, code in enumerate(codes)] if expected else []
    for _ in range(min(50, samples)):  # warm caches (unsupported fields, static PCIe maxima, pydantic)
        one_sample(backend, expected, xids)
    read_only = _cpu_ms(lambda: backend.sample(), samples)
    full = _cpu_ms(lambda: one_sample(backend, expected, xids), samples)
    wall = _wall_ms(lambda: one_sample(backend, expected, xids), min(samples, 500))
    return {
        "backend": backend.backend, "gpus": len(backend.sample().gpus), "samples": samples,
        "cpu_ms_per_sample_read_only": round(read_only, 4), "cpu_ms_per_sample": round(full, 4),
        "wall_ms_per_sample": round(wall, 4), "bytes_per_message": len(one_sample(backend, expected, xids)),
        "target_cpu_ms": TARGET_MS, "meets_target": full < TARGET_MS,
    }


def _cpu_ms(fn, n: int) -> float:
    t0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t0) * 1000 / n


def _wall_ms(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) * 1000 / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the fake backend")
    args = parser.parse_args()
    report: dict = {"fake": measure(FakeNvml(args.gpus), args.gpus, args.samples)}
    try:
        from relaunch.gpu_probe.adapters.nvml import NvmlBackend

        real = NvmlBackend()
    except BackendUnavailable as exc:
        report["nvml"] = {"skipped": f"no usable NVML here: {exc}"}
    else:
        gpus = len(real.sample().gpus)
        # Real NVML calls cost driver time; fewer samples keep the run short on big nodes.
        report["nvml"] = measure(real, gpus, max(args.samples // 10, 50))
        report["nvml"]["system"] = real.system_info()
        real.close()
    print(json.dumps(report, indent=2))
    missed = [name for name, r in report.items() if r.get("meets_target") is False]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
