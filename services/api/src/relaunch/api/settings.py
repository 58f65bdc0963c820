from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class ApiSettings(ServiceSettings):
    """RELAUNCH_API_* environment variables (RELAUNCH_API_URL is the CLI's, not read here)."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_API_", extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    """Address the HTTP API listens on."""
    port: int = 14080
    """Port the HTTP API listens on (/healthz and /metrics are served here too)."""
    url: str = ""
    """Ignored here: the CLI's RELAUNCH_API_URL shares this prefix."""
