from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class ProbeSettings(ServiceSettings):
    """RELAUNCH_PROBE_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_PROBE_", extra="forbid", frozen=True)

    node: str = ""
    """The Slurm node this probe reports for (required)."""
    interval_s: float = 10.0
    """Seconds between NodeHealth publications (they double as heartbeats)."""
    expected_gpus: int = 8
    """GPUs the node should have; fewer means one fell off the bus."""
    backend: str = "fake"
    """fake (no GPU here) or nvml (issue 6)."""
