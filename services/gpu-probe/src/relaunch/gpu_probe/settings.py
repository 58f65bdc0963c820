from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class ProbeSettings(ServiceSettings):
    """RELAUNCH_PROBE_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_PROBE_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url",)
    """NATS only."""

    node: str = ""
    """The Slurm node this probe reports for (required; `--node` sets it too)."""
    interval_s: float = Field(2.0, gt=0)
    """Seconds between NodeHealth publications. They double as heartbeats: a consumer that hears
    nothing from a node for a few intervals treats its probe (or the node) as down: the detector
    finds a lost host after 2 silent intervals (docs/reliability.md, "Faults between hosts"), so the
    interval bounds how fast that is."""
    expected_gpus: int = Field(8, ge=0)
    """GPUs the node should have; fewer answering NVML means one fell off the bus (0: do not check the
    count). The fake backend simulates this many."""
    backend: Literal["fake", "nvml"] = "fake"
    """fake (no GPU here: the local stack and tests; accepts `relaunch inject`) or nvml (a real GPU node)."""
    xid_window_s: float = Field(3600.0, gt=0)
    """How long an XID keeps counting in the verdict and is reported in NodeHealth."""
    app_xid_repeat: int = Field(3, ge=2)
    """Times an application XID (13, 31, 43, 45) must repeat on one GPU within the window to count as hardware."""
    event_wait_s: float = Field(0.5, gt=0, le=5)
    """Longest single wait on the NVML event set; bounds how long shutdown waits for the XID thread."""
