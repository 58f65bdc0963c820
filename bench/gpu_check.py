"""Check gpu-probe's NVML path on a real GPU machine: read every field of every GPU, wait on the XID
event set for a bounded time, classify, and print one JSON report with the time per sample.

Without a usable NVML (no GPU, no driver) it says so, measures the fake backend instead, and exits 0,
so it can run anywhere. Exit 1 only when NVML works but a sample fails to read or classify.

    python bench/gpu_check.py [--samples 20] [--wait 5] [--expected-gpus N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.domain.classification import classify
from relaunch.gpu_probe.domain.samples import BackendUnavailable, GpuBackend


def timed_samples(backend: GpuBackend, n: int) -> dict:
    wall, cpu = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.process_time()
        backend.sample()
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    # The first sample also discovers unsupported fields and static PCIe maxima: report it apart.
    steady_wall, steady_cpu = wall[1:] or wall, cpu[1:] or cpu
    return {
        "samples": n, "first_sample_wall_ms": round(wall[0], 3),
        "wall_ms_per_sample": _stats(steady_wall), "cpu_ms_per_sample": _stats(steady_cpu),
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": round(sum(values) / len(values), 3), "max": round(max(values), 3)}


def report(backend: GpuBackend, samples: int, wait_s: float, expected: int | None) -> dict:
    timing = timed_samples(backend, samples)
    sample = backend.sample()
    t0 = time.perf_counter()
    xids = []
    deadline = t0 + wait_s
    while time.perf_counter() < deadline:  # the event set, waited on in bounded slices as the probe does
        xids += backend.wait_xids(min(0.5, max(deadline - time.perf_counter(), 0)))
    waited = time.perf_counter() - t0
    expected_gpus = expected if expected is not None else len(sample.gpus)
    assessment = classify(sample, xids, expected_gpus, dt.datetime.now(dt.UTC))
    fields = set(type(sample.gpus[0]).model_fields) - {"index", "notes", "xids"} if sample.gpus else set()
    unread = sorted({name for g in sample.gpus if not g.lost for name in fields if getattr(g, name) is None})
    return {
        "system": backend.system_info(),
        "gpu_count": sample.gpu_count, "expected_gpus": expected_gpus, "node_notes": list(sample.notes),
        "verdict": assessment.verdict, "reasons": list(assessment.reasons), "notes": list(assessment.notes),
        "xid_wait_s": round(waited, 3), "xids_seen": [{"gpu": e.gpu, "code": e.code} for e in xids],
        "fields_unread_on_some_gpu": unread,
        "timing": timing,
        "gpus": [g.model_dump(mode="json", exclude_defaults=False) for g in assessment.gpus],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20, help="timed samples")
    parser.add_argument("--wait", type=float, default=5.0, help="seconds to wait on the XID event set")
    parser.add_argument("--expected-gpus", type=int, default=None, help="default: the GPUs found")
    args = parser.parse_args()
    try:
        from relaunch.gpu_probe.adapters.nvml import NvmlBackend

        backend: GpuBackend = NvmlBackend()
    except BackendUnavailable as exc:
        fake = FakeNvml(8)
        out = {"nvidia_gpu": False, "reason": str(exc),
               "fake": report(fake, args.samples, min(args.wait, 0.5), 8)}
        out["fake"].pop("gpus")  # the fake's readings are made up; its timing is the point
        print(json.dumps(out, indent=2))
        print("no usable NVML on this machine: measured the fake backend instead", file=sys.stderr)
        return 0
    try:
        out = {"nvidia_gpu": True, **report(backend, args.samples, args.wait, args.expected_gpus)}
    except Exception as exc:  # the point of the check is to find this: report it, fail
        print(json.dumps({"nvidia_gpu": True, "error": f"{type(exc).__name__}: {exc}"}, indent=2))
        return 1
    finally:
        backend.close()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
