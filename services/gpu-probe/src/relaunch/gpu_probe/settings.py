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
    backend: Literal["fake", "nvml"] = "nvml"
    """nvml (the default: a real GPU node, readings and XID events from the NVIDIA driver) or fake
    (no GPU: the local stack and tests). The fake backend invents healthy readings and obeys
    `relaunch inject`, so whoever may send that can fail the node: the probe starts with it only
    when it is named here and `allow_fake` confirms it (docs/security.md, "Who may inject")."""
    allow_fake: bool = False
    """Must be true (RELAUNCH_PROBE_ALLOW_FAKE=1) beside backend=fake, or the probe refuses to start:
    one setting copied from a demo must not turn a GPU node's probe into a fake one. The local
    stack (scripts/stack.sh) and the compose demo set both; nothing else should."""
    xid_window_s: float = Field(3600.0, gt=0)
    """How long an XID keeps counting in the verdict and is reported in NodeHealth."""
    app_xid_repeat: int = Field(3, ge=2)
    """Times an application XID (13, 31, 43, 45) must repeat on one GPU within the window to count as hardware."""
    event_wait_s: float = Field(0.5, gt=0, le=5)
    """Longest single wait on the NVML event set; bounds how long shutdown waits for the XID thread."""
