"""The NVML adapter: the only module that imports pynvml (package nvidia-ml-py).

Invariants:
- NVML is initialised once per process (`_init_once`), never per call: nvmlInit is slow and
  reference-counted, and re-initialising inside every method is how probes leak and stall;
- per GPU, every field is read on its own and an NVML error there becomes None plus a note on that
  GPU; a field NVML calls NotSupported (or a function the driver lacks) is not asked again, so an
  unsupported field costs nothing after the first sample;
- "GPU is lost" marks the GPU lost for good (it does not come back without a reset) and stops all
  calls to it, since calls to a lost GPU can each take seconds;
- GPUs are identified by the handles taken at start, not by index on every sample: when a GPU falls
  off the bus, re-enumerating would shift the indices of the others;
- NVLink counters are cumulative in NVML; we report deltas between samples (`counter_delta`);
- NVML delivers only XIDs that happen after the event set is registered: what happened before the
  probe started shows through its lasting effects instead (a lost GPU, ECC counts, pending remaps).
The only exception that leaves this module is BackendUnavailable, from the constructor.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pynvml

from relaunch.common.schemas import GpuReading

from ..domain.samples import BackendUnavailable, Sample, XidEvent, counter_delta

log = logging.getLogger(__name__)

# Clock event ("throttle") reason bits, from nvml.h; part of NVML's ABI, so they never change.
# Only slowdowns that signal a fault are reported; power capping and idle clocks are normal.
THROTTLE_BITS: dict[int, Literal["hw_slowdown", "hw_thermal", "sw_thermal", "power_brake"]] = {
    0x08: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "power_brake",
}

_init_lock = threading.Lock()
_INITIALISED = "_relaunch_nvml_initialised"
"""Marker set on the NVML module object once nvmlInit succeeded (not an id(): ids of collected
stand-ins are reused, which once made a fresh stand-in look initialised)."""


def _init_once(nvml: Any) -> None:
    """nvmlInit once per process (per NVML module: tests pass a stand-in)."""
    with _init_lock:
        if getattr(nvml, _INITIALISED, False):
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise BackendUnavailable(
                f"NVML cannot start: {exc}. Is the NVIDIA driver installed and libnvidia-ml.so.1 on the "
                "library path? Only a demo or test machine without a GPU may use RELAUNCH_PROBE_BACKEND=fake "
                "with RELAUNCH_PROBE_ALLOW_FAKE=1.") from exc
        except OSError as exc:  # a broken library file rather than a missing one
            raise BackendUnavailable(f"NVML cannot be loaded: {exc}") from exc
        setattr(nvml, _INITIALISED, True)


class _Lost(Exception):
    """NVML said 'GPU is lost' for this GPU."""


@dataclass
class _Gpu:
    index: int
    handle: Any
    uuid: str | None = None
    name: str | None = None
    lost: bool = False
    unsupported: dict[str, str] = field(default_factory=dict)
    static: dict[str, Any] = field(default_factory=dict)
    nvlink_previous: dict[str, int | None] = field(default_factory=dict)


def _handle_key(handle: Any) -> int | None:
    """The address behind an NVML device handle: events name their GPU by handle, and two ctypes
    pointer objects to the same device do not compare equal."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class NvmlBackend:
    backend: Literal["nvml"] = "nvml"

    def __init__(self, clock: Callable[[], dt.datetime] = _utcnow, nvml: Any = None) -> None:
        self._nvml = nvml if nvml is not None else pynvml
        self._clock = clock
        n = self._nvml
        self._Error = n.NVMLError
        self._NOT_SUPPORTED = {n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND}
        self._LOST = n.NVML_ERROR_GPU_IS_LOST
        self._TIMEOUT = n.NVML_ERROR_TIMEOUT
        _init_once(n)
        self._notes: list[str] = []
        try:
            count = n.nvmlDeviceGetCount()
        except self._Error as exc:
            raise BackendUnavailable(f"NVML started but cannot count the GPUs: {exc}") from exc
        self._gpus = [self._open(i) for i in range(count)]
        self._by_key = {_handle_key(g.handle): g.index for g in self._gpus if g.handle is not None}
        self._event_lock = threading.Lock()
        self._event_set = self._register_xids()
        self._throttle = self._throttle_fn()
        self._wait_error = ""

    # -- the backend interface ------------------------------------------------------------------

    def sample(self) -> Sample:
        readings = tuple(self._read(g) for g in self._gpus)
        return Sample(gpus=readings, gpu_count=sum(1 for r in readings if not r.lost), notes=tuple(self._notes))

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        # The lock keeps close() from freeing the event set under a wait still running in its
        # thread at shutdown (freeing it mid-wait is undefined behaviour in the C library).
        with self._event_lock:
            if self._event_set is not None:
                return self._wait(timeout_s)
        time.sleep(timeout_s)  # nothing to wait on; keep the caller's loop from spinning
        return []

    def _wait(self, timeout_s: float) -> list[XidEvent]:
        n, events, wait_ms = self._nvml, [], max(int(timeout_s * 1000), 0)
        while True:
            try:
                data = n.nvmlEventSetWait(self._event_set, wait_ms)
            except self._Error as exc:
                if exc.value != self._TIMEOUT and not events:
                    # e.g. a GPU was lost while we waited: the next sample reports it; do not spin,
                    # and say it once rather than every second.
                    if str(exc) != self._wait_error:
                        log.warning("waiting for XID events failed: %s", exc)
                    self._wait_error = str(exc)
                    time.sleep(timeout_s)
                return events
            if data.eventType & n.nvmlEventTypeXidCriticalError:
                gpu = self._gpu_of(data.device)
                if gpu is None:
                    log.warning("XID %d on a GPU this probe does not know; dropped", data.eventData)
                else:
                    events.append(XidEvent(gpu=gpu, code=int(data.eventData), at=self._clock()))
            wait_ms = 0  # drain what arrived together without waiting longer

    def system_info(self) -> dict[str, str]:
        """Driver and library versions, for reports (bench/gpu_check.py)."""
        n, info = self._nvml, {"backend": "nvml"}
        for key, fn in (("driver", n.nvmlSystemGetDriverVersion), ("nvml", n.nvmlSystemGetNVMLVersion),
                        ("cuda_driver", n.nvmlSystemGetCudaDriverVersion)):
            try:
                value = fn()
            except self._Error as exc:
                value = f"unknown ({exc})"
            info[key] = value.decode() if isinstance(value, bytes) else str(value)
        return info

    def close(self) -> None:
        # NVML itself stays initialised: once per process, and the process is ending.
        with self._event_lock:
            if self._event_set is not None:
                try:
                    self._nvml.nvmlEventSetFree(self._event_set)
                except self._Error as exc:
                    log.debug("freeing the NVML event set: %s", exc)
                self._event_set = None

    # -- start-up -------------------------------------------------------------------------------

    def _open(self, index: int) -> _Gpu:
        n = self._nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
        except self._Error as exc:
            self._notes.append(f"GPU {index}: cannot open: {exc}")
            return _Gpu(index=index, handle=None, lost=True)
        gpu = _Gpu(index=index, handle=handle)
        gpu.uuid = self._static(gpu, "uuid", n.nvmlDeviceGetUUID)
        gpu.name = self._static(gpu, "name", n.nvmlDeviceGetName)
        return gpu

    def _static(self, gpu: _Gpu, what: str, fn: Callable[[Any], Any]) -> Any:
        try:
            value = fn(gpu.handle)
        except self._Error as exc:
            self._notes.append(f"GPU {gpu.index}: {what}: {exc}")
            return None
        return value.decode() if isinstance(value, bytes) else value

    def _register_xids(self) -> Any:
        n = self._nvml
        try:
            event_set = n.nvmlEventSetCreate()
        except self._Error as exc:
            self._notes.append(f"XID events unavailable: {exc}")
            return None
        for gpu in self._gpus:
            if gpu.handle is None:
                continue
            try:
                if not n.nvmlDeviceGetSupportedEventTypes(gpu.handle) & n.nvmlEventTypeXidCriticalError:
                    self._notes.append(f"GPU {gpu.index}: XID events: Not Supported")
                    continue
                n.nvmlDeviceRegisterEvents(gpu.handle, n.nvmlEventTypeXidCriticalError, event_set)
            except self._Error as exc:
                self._notes.append(f"GPU {gpu.index}: XID events: {exc}")
        return event_set

    def _gpu_of(self, device: Any) -> int | None:
        index = self._by_key.get(_handle_key(device))
        if index is not None:
            return index
        try:
            return int(self._nvml.nvmlDeviceGetIndex(device))
        except self._Error:
            return None

    # -- one sample -----------------------------------------------------------------------------

    def _read(self, gpu: _Gpu) -> GpuReading:
        ident = dict(index=gpu.index, uuid=gpu.uuid, name=gpu.name)
        if gpu.lost:
            return GpuReading(**ident, lost=True, notes=["GPU is lost"])
        notes: list[str] = [f"{what}: {why}" for what, why in gpu.unsupported.items()]
        try:
            fields = self._fields(gpu, notes)
        except _Lost:
            gpu.lost = True
            return GpuReading(**ident, lost=True, notes=["GPU is lost"])
        return GpuReading(**ident, **fields, notes=notes)

    def _get(self, gpu: _Gpu, what: str, notes: list[str], fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call for one field: its value, or None with a note. Raises only _Lost."""
        if what in gpu.unsupported:
            return None
        try:
            return fn(gpu.handle, *args)
        except self._Error as exc:
            if exc.value == self._LOST:
                raise _Lost from exc
            if exc.value in self._NOT_SUPPORTED:
                gpu.unsupported[what] = str(exc)
            notes.append(f"{what}: {exc}")
        except Exception as exc:  # a binding/driver mismatch must not stop the probe: note it and go on
            notes.append(f"{what}: {type(exc).__name__}: {exc}")
        return None

    def _fields(self, gpu: _Gpu, notes: list[str]) -> dict[str, Any]:
        n = self._nvml
        get = self._get
        out: dict[str, Any] = {}
        temp = get(gpu, "temperature", notes, n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU)
        out["temperature_c"] = None if temp is None else float(temp)
        power = get(gpu, "power", notes, n.nvmlDeviceGetPowerUsage)
        out["power_w"] = None if power is None else power / 1000.0
        unc, cor = n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_MEMORY_ERROR_TYPE_CORRECTED
        ecc = n.nvmlDeviceGetTotalEccErrors
        out["ecc_uncorrected"] = get(gpu, "ecc", notes, ecc, unc, n.NVML_VOLATILE_ECC) or 0
        out["ecc_corrected"] = get(gpu, "ecc", notes, ecc, cor, n.NVML_VOLATILE_ECC)
        out["ecc_uncorrected_aggregate"] = get(gpu, "ecc", notes, ecc, unc, n.NVML_AGGREGATE_ECC)
        out["ecc_corrected_aggregate"] = get(gpu, "ecc", notes, ecc, cor, n.NVML_AGGREGATE_ECC)
        pages = n.nvmlDeviceGetRetiredPages
        sbe = get(gpu, "retired pages", notes, pages, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        dbe = get(gpu, "retired pages", notes, pages, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = get(gpu, "retired pages", notes, n.nvmlDeviceGetRetiredPagesPendingStatus)
        out["retired_pages_sbe"] = None if sbe is None else len(sbe)
        out["retired_pages_dbe"] = None if dbe is None else len(dbe)
        out["retired_pages_pending"] = None if pending is None else bool(pending)
        rows = get(gpu, "remapped rows", notes, n.nvmlDeviceGetRemappedRows)
        if rows is not None:
            corr, uncorr, rpending, failure = rows
            out.update(remapped_rows_correctable=int(corr), remapped_rows_uncorrectable=int(uncorr),
                       remap_pending=bool(rpending), remap_failure=bool(failure))
        out.update(self._nvlink(gpu, notes))
        reasons = get(gpu, "throttle reasons", notes, self._throttle)
        out["throttle_reasons"] = [] if reasons is None else [r for bit, r in THROTTLE_BITS.items() if reasons & bit]
        out["pcie_gen"] = get(gpu, "pcie gen", notes, n.nvmlDeviceGetCurrPcieLinkGeneration)
        out["pcie_width"] = get(gpu, "pcie width", notes, n.nvmlDeviceGetCurrPcieLinkWidth)
        # The maxima do not change while the machine runs: read once.
        for key, fn in (("pcie_gen_max", n.nvmlDeviceGetMaxPcieLinkGeneration),
                        ("pcie_width_max", n.nvmlDeviceGetMaxPcieLinkWidth)):
            if key not in gpu.static:
                value = get(gpu, key.replace("_", " "), notes, fn)
                if value is not None:
                    gpu.static[key] = value
            out[key] = gpu.static.get(key)
        util = get(gpu, "utilization", notes, n.nvmlDeviceGetUtilizationRates)
        if util is not None:
            out.update(utilization_pct=float(util.gpu), memory_utilization_pct=float(util.memory))
        mem = get(gpu, "memory", notes, n.nvmlDeviceGetMemoryInfo)
        if mem is not None:
            out.update(memory_used_bytes=int(mem.used), memory_total_bytes=int(mem.total))
        return out

    def _throttle_fn(self) -> Callable[[Any], int]:
        # Renamed "clocks event reasons" in recent drivers; older ones only know the throttle name.
        n = self._nvml
        if hasattr(n, "nvmlDeviceGetCurrentClocksEventReasons"):
            def read(handle: Any) -> int:
                try:
                    return n.nvmlDeviceGetCurrentClocksEventReasons(handle)
                except self._Error as exc:
                    if exc.value != n.NVML_ERROR_FUNCTION_NOT_FOUND:
                        raise
                    return n.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            return read
        return n.nvmlDeviceGetCurrentClocksThrottleReasons

    def _nvlink(self, gpu: _Gpu, notes: list[str]) -> dict[str, int | None]:
        """CRC (flow-control and data), replay and recovery totals over all links, in one NVML call."""
        n = self._nvml
        ids = (n.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, n.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
               n.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, n.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL)
        values = self._get(gpu, "nvlink", notes, n.nvmlDeviceGetFieldValues, list(ids))
        if values is None:
            return {}
        totals = [self._field_value(v) for v in values]
        if all(t is None for t in totals):
            # A GPU without NVLink (PCIe cards) answers NotSupported per field: stop asking.
            gpu.unsupported["nvlink"] = "Not Supported"
            notes.append("nvlink: Not Supported")
            return {}
        flit, data, replay, recovery = totals
        crc = None if flit is None and data is None else (flit or 0) + (data or 0)
        out = {}
        for key, total in (("nvlink_crc_errors", crc), ("nvlink_replay_errors", replay),
                           ("nvlink_recovery_errors", recovery)):
            out[key] = counter_delta(gpu.nvlink_previous.get(key), total)
            gpu.nvlink_previous[key] = total
        return out

    def _field_value(self, value: Any) -> int | None:
        n = self._nvml
        if value.nvmlReturn != n.NVML_SUCCESS:
            return None
        kind = value.valueType
        if kind == n.NVML_VALUE_TYPE_DOUBLE:
            return int(value.value.dVal)
        member = {n.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal", n.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
                  n.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal", n.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
                  n.NVML_VALUE_TYPE_SIGNED_INT: "siVal"}.get(kind, "ullVal")
        return int(getattr(value.value, member))
