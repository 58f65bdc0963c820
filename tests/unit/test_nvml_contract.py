"""The GPU backend contract: the same assertions against the fake, the NVML adapter over a scripted
stand-in for pynvml, and the real NVML where a GPU exists (skipped elsewhere, with the reason).

The stand-in (`StubNvml`) has pynvml's names, constants and ctypes structures, so the adapter's own
logic (NotSupported, GPU lost, deltas, events) is exercised on machines without a GPU; a test below
checks that every NVML name the adapter uses exists in the real binding.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import importlib
import inspect
import os
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

from relaunch.common.schemas import NodeHealth
from relaunch.gpu_probe.adapters import nvml as nvml_adapter
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.adapters.nvml import NvmlBackend
from relaunch.gpu_probe.domain.classification import classify
from relaunch.gpu_probe.domain.samples import BackendUnavailable, GpuBackend, Sample, XidEvent

# Tests may read the binding for its constants and ctypes structures; product code imports it only
# in adapters/nvml.py.
pynvml = importlib.import_module("pynvml")

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
GIB = 1024**3

_CONSTANTS = [
    "NVML_SUCCESS", "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_TIMEOUT", "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_UNKNOWN", "NVML_TEMPERATURE_GPU",
    "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC",
    "NVML_AGGREGATE_ECC", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
    "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "NVML_VALUE_TYPE_DOUBLE", "NVML_VALUE_TYPE_UNSIGNED_INT",
    "NVML_VALUE_TYPE_UNSIGNED_LONG", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "NVML_VALUE_TYPE_SIGNED_LONG_LONG",
    "NVML_VALUE_TYPE_SIGNED_INT", "nvmlEventTypeXidCriticalError",
]


class StubError(Exception):
    _TEXT = {3: "Not Supported", 10: "Timeout", 12: "NVML Shared Library Not Found", 13: "Function Not Found",
             15: "GPU is lost", 999: "Unknown Error"}

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._TEXT.get(self.value, f"NVML error {self.value}")


@dataclass
class StubGpu:
    lost: bool = False
    unsupported: set[str] = field(default_factory=lambda: {"retired pages"})  # as on an H100
    failing: set[str] = field(default_factory=set)  # answer "Unknown Error"
    nvlink_fields_supported: bool = True
    nvlink: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # crc flit, crc data, replay, recovery
    ecc_uncorrected: int = 0
    throttle: int = 0
    pcie: tuple[int, int, int, int] = (5, 16, 5, 16)


class StubNvml:
    """A stand-in for the pynvml module over scripted GPUs: same names, constants and structures."""

    NVMLError = StubError

    def __init__(self, gpus: int = 8, init_error: int | None = None) -> None:
        for name in _CONSTANTS:
            setattr(self, name, getattr(pynvml, name))
        self.gpus = [StubGpu() for _ in range(gpus)]
        self.init_error = init_error
        self.init_calls = 0
        self.calls: dict[str, int] = {}
        self.xids: queue.Queue[tuple[int, int]] = queue.Queue()

    # plumbing
    @staticmethod
    def _handle(index: int):
        return ctypes.cast(ctypes.c_void_p(1000 + index), pynvml.c_nvmlDevice_t)

    def _gpu(self, handle, what: str) -> StubGpu:
        self.calls[what] = self.calls.get(what, 0) + 1
        gpu = self.gpus[ctypes.cast(handle, ctypes.c_void_p).value - 1000]
        if gpu.lost:
            raise StubError(15)
        if what in gpu.unsupported:
            raise StubError(3)
        if what in gpu.failing:
            raise StubError(999)
        return gpu

    # library
    def nvmlInit(self):
        self.init_calls += 1
        if self.init_error is not None:
            raise StubError(self.init_error)

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self._handle(index)

    def nvmlDeviceGetIndex(self, handle):
        return ctypes.cast(handle, ctypes.c_void_p).value - 1000

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-stub-{self.nvmlDeviceGetIndex(handle)}"

    def nvmlDeviceGetName(self, handle):
        return "NVIDIA H100 80GB HBM3 (stub)"

    # readings
    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._gpu(handle, "temperature")
        return 45

    def nvmlDeviceGetPowerUsage(self, handle):
        self._gpu(handle, "power")
        return 250_000

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        gpu = self._gpu(handle, "ecc")
        return gpu.ecc_uncorrected if error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetRetiredPages(self, handle, cause):
        self._gpu(handle, "retired pages")
        return []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        self._gpu(handle, "retired pages")
        return 0

    def nvmlDeviceGetRemappedRows(self, handle):
        self._gpu(handle, "remapped rows")
        return (0, 0, 0, 0)

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        gpu = self._gpu(handle, "nvlink")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            values[i].fieldId = fid
            if not gpu.nvlink_fields_supported:
                values[i].nvmlReturn = self.NVML_ERROR_NOT_SUPPORTED
                continue
            values[i].nvmlReturn = self.NVML_SUCCESS
            values[i].valueType = self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            values[i].value.ullVal = gpu.nvlink[i]
        return values

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._gpu(handle, "throttle reasons").throttle

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._gpu(handle, "throttle reasons").throttle

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._gpu(handle, "pcie gen").pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._gpu(handle, "pcie width").pcie[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._gpu(handle, "pcie gen max").pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._gpu(handle, "pcie width max").pcie[3]

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._gpu(handle, "utilization")
        return pynvml.c_nvmlUtilization_t(gpu=0, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._gpu(handle, "memory")
        return pynvml.c_nvmlMemory_t(total=80 * GIB, free=80 * GIB, used=0)

    # events
    def nvmlEventSetCreate(self):
        return ctypes.c_void_p(1)

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return self.nvmlEventTypeXidCriticalError

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        pass

    def nvmlEventSetWait(self, event_set, timeout_ms):
        try:
            gpu, code = self.xids.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise StubError(self.NVML_ERROR_TIMEOUT) from None
        data = pynvml.c_nvmlEventData_t()
        data.device = self._handle(gpu)
        data.eventType = self.nvmlEventTypeXidCriticalError
        data.eventData = code
        return data

    def nvmlEventSetFree(self, event_set):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "570.00 (stub)"

    def nvmlSystemGetNVMLVersion(self):
        return "12.570.00"

    def nvmlSystemGetCudaDriverVersion(self):
        raise StubError(self.NVML_ERROR_NOT_SUPPORTED)


# -- the backends under contract ----------------------------------------------------------------


@dataclass
class Faults:
    """How a test makes each fault happen on one kind of backend."""

    xid: object
    lose: object
    nvlink: object


def _fake():
    from relaunch.common.schemas import FaultInjection

    backend = FakeNvml(8)

    def inject(**kw):
        backend.inject(FaultInjection(cluster="c", node="n", requested_at=NOW, **kw))

    return backend, Faults(xid=lambda gpu, code: inject(fault="xid", gpu=gpu, code=code),
                           lose=lambda gpu: inject(fault="gpu-lost", gpu=gpu),
                           nvlink=lambda gpu, n: inject(fault="nvlink", gpu=gpu, count=n))


def _stub():
    stub = StubNvml(8)
    backend = NvmlBackend(nvml=stub)

    def nvlink(gpu, n):  # a cumulative counter that grows by n errors
        stub.gpus[gpu].nvlink[0] += n

    return backend, Faults(xid=lambda gpu, code: stub.xids.put((gpu, code)),
                           lose=lambda gpu: setattr(stub.gpus[gpu], "lost", True), nvlink=nvlink)


def _real():
    try:
        backend = NvmlBackend()
    except BackendUnavailable as exc:
        pytest.skip(f"real NVML not usable here ({str(exc).split('. ')[0]}); runs where an NVIDIA GPU and driver exist")
    return backend, None  # real faults cannot be made on demand


@pytest.fixture(params=["fake", "nvml-stub", "nvml-real"])
def backend_and_faults(request):
    backend, faults = {"fake": _fake, "nvml-stub": _stub, "nvml-real": _real}[request.param]()
    yield backend, faults
    backend.close()


@pytest.fixture
def backend(backend_and_faults) -> GpuBackend:
    return backend_and_faults[0]


@pytest.fixture
def faults(backend_and_faults) -> Faults:
    if backend_and_faults[1] is None:
        pytest.skip("faults cannot be injected into a real GPU")
    return backend_and_faults[1]


# Which note prefix explains a None in which field (the adapter names fields this way).
_NOTE_FOR = {
    "temperature_c": "temperature", "power_w": "power", "ecc_corrected": "ecc", "ecc_uncorrected_aggregate": "ecc",
    "retired_pages_sbe": "retired pages", "retired_pages_pending": "retired pages",
    "remapped_rows_correctable": "remapped rows", "remap_pending": "remapped rows", "nvlink_crc_errors": "nvlink",
    "nvlink_recovery_errors": "nvlink", "pcie_gen": "pcie gen", "pcie_width": "pcie width",
    "pcie_gen_max": "pcie gen", "pcie_width_max": "pcie width", "utilization_pct": "utilization",
    "memory_total_bytes": "memory",
}


def test_a_sample_lists_every_gpu_once_in_index_order(backend):
    sample = backend.sample()
    assert isinstance(sample, Sample)
    assert [g.index for g in sample.gpus] == list(range(len(sample.gpus)))
    assert sample.gpu_count == sum(1 for g in sample.gpus if not g.lost)
    assert backend.backend in ("fake", "nvml")


def test_a_field_it_cannot_read_is_none_and_a_note_says_why(backend):
    for gpu in backend.sample().gpus:
        if gpu.lost:
            continue
        for name, prefix in _NOTE_FOR.items():
            if getattr(gpu, name) is None:
                assert any(n.startswith(prefix) for n in gpu.notes), f"GPU {gpu.index}: {name} is None, no note"


def test_readings_are_physically_plausible(backend):
    for gpu in backend.sample().gpus:
        if gpu.lost:
            continue
        if gpu.temperature_c is not None:
            assert 0 < gpu.temperature_c < 130
        if gpu.memory_total_bytes is not None:
            assert 0 <= (gpu.memory_used_bytes or 0) <= gpu.memory_total_bytes
        if gpu.pcie_width is not None and gpu.pcie_width_max is not None:
            assert 0 < gpu.pcie_width <= gpu.pcie_width_max


def test_the_first_sample_only_sets_the_nvlink_baseline(backend):
    for gpu in backend.sample().gpus:
        assert gpu.nvlink_crc_errors in (0, None)
        assert gpu.nvlink_replay_errors in (0, None)
        assert gpu.nvlink_recovery_errors in (0, None)


def test_waiting_for_xids_is_bounded(backend):
    t0 = time.monotonic()
    assert backend.wait_xids(0.05) == []
    assert time.monotonic() - t0 < 2.0


def test_a_sample_becomes_a_node_health(backend):
    sample = backend.sample()
    assessment = classify(sample, [], expected_gpus=len(sample.gpus), now=NOW)
    health = NodeHealth(cluster="c", node="n", verdict=assessment.verdict, reasons=list(assessment.reasons),
                        gpus=list(assessment.gpus), backend=backend.backend, at=NOW, gpu_count=sample.gpu_count)
    assert NodeHealth.model_validate_json(health.model_dump_json(by_alias=True)) == health


def test_system_info_names_the_backend(backend):
    info = backend.system_info()
    assert info["backend"] == backend.backend and all(isinstance(v, str) for v in info.values())


def test_close_twice_is_harmless(backend):
    backend.close()
    backend.close()


def test_an_xid_arrives_with_its_gpu_and_code(backend, faults):
    faults.xid(2, 79)
    events = backend.wait_xids(1.0)
    assert [(e.gpu, e.code) for e in events] == [(2, 79)]
    assert isinstance(events[0], XidEvent) and events[0].at.tzinfo is not None


def test_xids_that_arrive_together_come_back_together(backend, faults):
    faults.xid(0, 13)
    faults.xid(1, 48)
    assert sorted((e.gpu, e.code) for e in backend.wait_xids(1.0)) == [(0, 13), (1, 48)]


def test_a_lost_gpu_stays_listed_and_stops_counting(backend, faults):
    faults.lose(3)
    sample = backend.sample()
    assert sample.gpu_count == 7 and len(sample.gpus) == 8
    lost = sample.gpus[3]
    assert lost.lost and lost.temperature_c is None and any("lost" in n for n in lost.notes)
    verdict = classify(sample, [], expected_gpus=8, now=NOW)
    assert verdict.verdict == "failed" and any("GPU 3 is lost" in r for r in verdict.reasons)


def test_nvlink_errors_are_reported_as_deltas(backend, faults):
    backend.sample()  # baseline
    faults.nvlink(1, 250)
    first = backend.sample().gpus[1].nvlink_crc_errors
    assert first is not None and first >= 250


# -- the NVML adapter's own duties (over the stand-in) ------------------------------------------


def test_nvml_absent_is_a_clear_error_not_a_crash():
    stub = StubNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(BackendUnavailable) as err:
        NvmlBackend(nvml=stub)
    assert "NVML Shared Library Not Found" in str(err.value) and "RELAUNCH_PROBE_BACKEND=fake" in str(err.value)


def test_the_real_binding_without_nvml_is_a_clear_error():
    try:
        NvmlBackend().close()
    except BackendUnavailable as exc:
        assert "NVML" in str(exc)
    else:
        pytest.skip("NVML works on this machine")


def test_the_probe_exits_2_with_the_reason_when_nvml_is_absent():
    try:
        NvmlBackend().close()
        pytest.skip("NVML works on this machine")
    except BackendUnavailable:
        pass
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAUNCH_")}
    env.update(RELAUNCH_PROBE_BACKEND="nvml", RELAUNCH_NATS_URL="nats://127.0.0.1:1")
    out = subprocess.run([sys.executable, "-m", "relaunch.gpu_probe", "--node", "node1"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "NVML" in out.stderr and "Traceback" not in out.stderr


def test_nvml_is_initialised_once_per_process():
    stub = StubNvml(2)
    NvmlBackend(nvml=stub).sample()
    NvmlBackend(nvml=stub).sample()
    assert stub.init_calls == 1


def test_an_unsupported_field_is_asked_once_then_noted_every_sample():
    stub = StubNvml(1)
    backend = NvmlBackend(nvml=stub)
    for _ in range(3):
        gpu = backend.sample().gpus[0]
        assert gpu.retired_pages_sbe is None and "retired pages: Not Supported" in gpu.notes
    assert stub.calls["retired pages"] == 1


def test_another_nvml_error_is_a_note_and_asked_again():
    stub = StubNvml(1)
    stub.gpus[0].failing.add("power")
    backend = NvmlBackend(nvml=stub)
    gpu = backend.sample().gpus[0]
    assert gpu.power_w is None and "power: Unknown Error" in gpu.notes and gpu.temperature_c == 45.0
    stub.gpus[0].failing.clear()
    assert backend.sample().gpus[0].power_w == 250.0


def test_a_gpu_lost_mid_run_is_never_called_again():
    stub = StubNvml(2)
    backend = NvmlBackend(nvml=stub)
    backend.sample()
    stub.gpus[1].lost = True
    assert backend.sample().gpus[1].lost
    calls = dict(stub.calls)
    stub.gpus[1].lost = False  # even if it answered again, the handle is not to be trusted
    sample = backend.sample()
    assert sample.gpus[1].lost and sample.gpu_count == 1
    assert stub.calls["temperature"] == calls["temperature"] + 1  # GPU 0 only


def test_a_gpu_without_nvlink_is_noted_once():
    stub = StubNvml(1)
    stub.gpus[0].nvlink_fields_supported = False
    backend = NvmlBackend(nvml=stub)
    for _ in range(2):
        gpu = backend.sample().gpus[0]
        assert gpu.nvlink_crc_errors is None and "nvlink: Not Supported" in gpu.notes
    assert stub.calls["nvlink"] == 1


def test_fault_readings_come_through_the_adapter():
    stub = StubNvml(2)
    stub.gpus[0].ecc_uncorrected = 2
    stub.gpus[0].throttle = 0x08 | 0x40 | 0x04  # hw slowdown, hw thermal, sw power cap (normal, not reported)
    stub.gpus[1].pcie = (5, 8, 5, 16)
    gpus = NvmlBackend(nvml=stub).sample().gpus
    assert gpus[0].ecc_uncorrected == 2 and gpus[0].ecc_uncorrected_aggregate == 2
    assert gpus[0].throttle_reasons == ["hw_slowdown", "hw_thermal"]
    assert (gpus[1].pcie_width, gpus[1].pcie_width_max) == (8, 16)
    assert gpus[0].power_w == 250.0 and gpus[0].memory_total_bytes == 80 * GIB
    assert gpus[0].uuid == "GPU-stub-0"


def test_every_nvml_name_the_adapter_uses_exists_in_the_binding():
    source = inspect.getsource(nvml_adapter)
    names = set(re.findall(r"\b(?:n|nvml|self\._nvml)\.(nvml\w+|NVML_\w+)", source))
    assert names, "the pattern should find the adapter's NVML calls"
    missing = sorted(name for name in names if not hasattr(pynvml, name))
    assert not missing, f"not in nvidia-ml-py: {missing}"
    stub_names = {n for n in dir(StubNvml(1)) if n.startswith(("nvml", "NVML_"))}
    assert not sorted(n for n in stub_names if not hasattr(pynvml, n)), "the stand-in invents names"


def test_close_waits_for_a_running_xid_wait_instead_of_freeing_under_it():
    stub = StubNvml(1)
    in_wait = threading.Event()
    freed_mid_wait = []
    wait = stub.nvmlEventSetWait

    def slow_wait(event_set, timeout_ms):
        in_wait.set()
        try:
            time.sleep(0.2)
            return wait(event_set, 0)
        finally:
            in_wait.clear()

    stub.nvmlEventSetWait = slow_wait
    stub.nvmlEventSetFree = lambda event_set: freed_mid_wait.append(in_wait.is_set())
    backend = NvmlBackend(nvml=stub)
    thread = threading.Thread(target=backend.wait_xids, args=(0.2,))
    thread.start()
    assert in_wait.wait(1)
    backend.close()
    thread.join()
    assert freed_mid_wait == [False]
