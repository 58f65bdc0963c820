"""The watchdog's own settings (RELAUNCH_WATCHDOG_*), beside the common ones; unknown keys are errors."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class WatchdogSettings(ServiceSettings):
    """RELAUNCH_WATCHDOG_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_WATCHDOG_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url",)
    """NATS only (the hold registry); Slurm through SLURM_CONF."""

    mode: Literal["act", "observe"] = "act"
    """act: release stranded jobs; observe: record what it would release."""
    bound_s: float = 60.0
    """A held job whose Advice no actuator touched for this long is released."""
    interval_s: float = 5.0
    """How often the hold registry is checked."""
