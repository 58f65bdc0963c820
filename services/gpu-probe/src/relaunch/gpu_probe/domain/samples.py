"""What a GPU backend hands the probe, and the interface both backends keep (the port).

Invariants:
- a backend never raises for a GPU or a field it cannot read: the reading carries None and a note;
  only a backend that cannot start at all raises (BackendUnavailable), so the probe never crashes mid-run;
- counters that only grow (NVLink errors) are reported as deltas between two samples, computed by
  `counter_delta`, so both backends give the same numbers for the same history.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from relaunch.common.errors import RelaunchError
from relaunch.common.schemas import FaultInjection, GpuReading


class BackendUnavailable(RelaunchError):
    """The GPU backend cannot start (no NVML library, no driver, no permission); the message says which."""


@dataclass(frozen=True)
class XidEvent:
    """One critical XID that the backend saw on one GPU. `at` is when the probe received it: NVML's
    event data carries no timestamp."""

    gpu: int
    code: int
    at: dt.datetime


@dataclass(frozen=True)
class Sample:
    """One reading of every GPU the backend knows, lost ones included (with `lost=True`)."""

    gpus: tuple[GpuReading, ...]
    gpu_count: int
    """GPUs that answered in this sample."""
    notes: tuple[str, ...] = ()
    """Node-level trouble (e.g. the GPU count itself could not be read)."""


class GpuBackend(Protocol):
    """The interface the fake and the NVML adapter both keep (the contract test checks it)."""

    backend: Literal["nvml", "fake"]

    def sample(self) -> Sample:
        """Read every GPU now. Never raises for one GPU or one field."""
        ...

    def wait_xids(self, timeout_s: float) -> list[XidEvent]:
        """Block up to `timeout_s` for critical XIDs; return those seen ([] on timeout). Runs in a thread."""
        ...

    def system_info(self) -> dict[str, str]:
        """Driver and library versions, for reports."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class Injectable(Protocol):
    """A backend that accepts injected faults (only the fake: a real GPU's faults are real)."""

    def inject(self, request: FaultInjection) -> str:
        """Apply the fault and say what was done; ValueError when it cannot apply here."""
        ...


def counter_delta(previous: int | None, current: int | None) -> int | None:
    """Growth of a monotonic counter between two samples.

    The first sample only sets the baseline (0): errors from before the probe started are history,
    not news. A counter that went down was reset (driver reload, explicit reset), so all of its
    current value is new.
    """
    if current is None:
        return None
    if previous is None:
        return 0
    return current - previous if current >= previous else current
