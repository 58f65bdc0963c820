"""A fake GPU backend for machines without a GPU: the local stack (one probe per Slurm node) and tests.

It keeps the NVML adapter's interface (`sample`, `wait_xids`, `close`; see domain/samples.py) and its
semantics: NVLink counters are cumulative and reported as deltas, a lost GPU stays in the list with
`lost=True` and stops counting, retired pages are unsupported (as on an H100, which remaps rows
instead). Faults arrive through `inject` (the probe wires it to `relaunch inject`); every fault but
an XID is a state that lasts until `clear`, as the real condition would until someone fixed the node.

Thread-safety: `sample` and `inject` run on different threads from `wait_xids`; one lock guards the
state and the XID queue does its own locking.
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from relaunch.common.schemas import FaultInjection, GpuReading, ThrottleReason

from ..domain.samples import Sample, XidEvent, counter_delta

GIB = 1024**3
DEFAULT_NVLINK_ERRORS = 500
"""NVLink errors added per sample when an injection names no count: enough to degrade the node."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class _Gpu:
    ecc_uncorrected: int = 0
    throttle: set[ThrottleReason] = field(default_factory=set)
    lost: bool = False
    nvlink_rate: dict[str, int] = field(default_factory=dict)
    nvlink_total: dict[str, int] = field(default_factory=lambda: {"crc": 0, "replay": 0, "recovery": 0})
    nvlink_previous: dict[str, int | None] = field(
        default_factory=lambda: {"crc": None, "replay": None, "recovery": None})


class FakeNvml:
    backend: Literal["fake"] = "fake"

    def __init__(self, gpu_count: int = 8, clock: Callable[[], dt.datetime] = _utcnow) -> None:
        self.gpu_count = gpu_count
        self._clock = clock
        self._lock = threading.Lock()
        self._gpus = [_Gpu() for _ in range(gpu_count)]
        self._xids: queue.Queue[XidEvent] = queue.Queue()

    # -- the backend interface ------------------------------------------------------------------

    def sample(self) -> Sample:
        with self._lock:
            readings = tuple(self._read(i, g) for i, g in enumerate(self._gpus))
        return Sample(gpus=readings, gpu_count=sum(1 for r in readings if not r.lost))

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        try:
            events = [self._xids.get(timeout=max(timeout_s, 0.0))]
        except queue.Empty:
            return []
        while True:  # drain what arrived together, as the NVML adapter does
            try:
                events.append(self._xids.get_nowait())
            except queue.Empty:
                return events

    def system_info(self) -> dict[str, str]:
        return {"backend": "fake", "driver": "none (fake)"}

    def close(self) -> None:
        pass

    # -- fault injection (fake only) ------------------------------------------------------------

    def inject(self, request: FaultInjection) -> str:
        """Apply one fault; returns what was done. ValueError when the request cannot apply here."""
        if request.fault == "clear":
            self.clear()
            return "cleared every injected fault"
        if request.gpu >= self.gpu_count:
            raise ValueError(f"GPU {request.gpu} does not exist: this node has {self.gpu_count} "
                             f"(0-{self.gpu_count - 1})")
        with self._lock:
            gpu = self._gpus[request.gpu]
            if request.fault == "xid":
                if request.code is None:
                    raise ValueError("an xid fault needs a code")
                self._xids.put(XidEvent(gpu=request.gpu, code=request.code, at=self._clock()))
                return f"XID {request.code} on GPU {request.gpu}"
            if request.fault == "ecc":
                gpu.ecc_uncorrected += request.count or 1
                return f"GPU {request.gpu} now has {gpu.ecc_uncorrected} uncorrectable ECC errors"
            if request.fault == "nvlink":
                rate = request.count or DEFAULT_NVLINK_ERRORS
                gpu.nvlink_rate[request.nvlink_counter] = rate
                return f"GPU {request.gpu}: {rate} NVLink {request.nvlink_counter} errors per sample until cleared"
            if request.fault == "throttle":
                reason = request.throttle or "hw_slowdown"
                gpu.throttle.add(reason)
                return f"GPU {request.gpu} throttled ({reason}) until cleared"
            if request.fault == "gpu-lost":
                gpu.lost = True
                return f"GPU {request.gpu} is lost until cleared"
        raise ValueError(f"unknown fault {request.fault!r}")

    def clear(self) -> None:
        with self._lock:
            self._gpus = [_Gpu() for _ in range(self.gpu_count)]
        while True:
            try:
                self._xids.get_nowait()
            except queue.Empty:
                return

    # -- readings -------------------------------------------------------------------------------

    def _read(self, index: int, g: _Gpu) -> GpuReading:
        ident = dict(index=index, uuid=f"GPU-fake-0000-0000-0000-{index:012d}", name="NVIDIA H100 80GB HBM3 (fake)")
        if g.lost:
            return GpuReading(**ident, lost=True, notes=["GPU is lost"])
        deltas = {}
        for counter in ("crc", "replay", "recovery"):
            g.nvlink_total[counter] += g.nvlink_rate.get(counter, 0)
            deltas[counter] = counter_delta(g.nvlink_previous[counter], g.nvlink_total[counter])
            g.nvlink_previous[counter] = g.nvlink_total[counter]
        return GpuReading(
            **ident, temperature_c=40.0 + index, power_w=120.0,
            ecc_uncorrected=g.ecc_uncorrected, ecc_corrected=0,
            ecc_corrected_aggregate=0, ecc_uncorrected_aggregate=g.ecc_uncorrected,
            remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remap_pending=False, remap_failure=False,
            nvlink_crc_errors=deltas["crc"], nvlink_replay_errors=deltas["replay"],
            nvlink_recovery_errors=deltas["recovery"],
            throttle_reasons=sorted(g.throttle),
            pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
            utilization_pct=0.0, memory_utilization_pct=0.0, memory_used_bytes=0, memory_total_bytes=80 * GIB,
            notes=["retired pages: Not Supported"],
        )
