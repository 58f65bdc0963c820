from __future__ import annotations

from typing import Literal

from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class ActuatorSettings(ServiceSettings):
    """RELAUNCH_ACTUATOR_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_ACTUATOR_", extra="forbid", frozen=True)

    poll_interval_s: float = 1.0
    """How often the observer runs `squeue --json`."""
    slurm_timeout_s: float = 15.0
    """Timeout of one Slurm command; past it the step is retried later."""
    mode: Literal["act", "observe"] = "act"
    """act: run Slurm commands; observe: record what would be run and touch nothing."""
