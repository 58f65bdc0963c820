from __future__ import annotations

from typing import ClassVar

from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class ApiSettings(ServiceSettings):
    """RELAUNCH_API_* environment variables (RELAUNCH_API_URL is the CLI's, not read here).

    Postgres and NATS come from CommonSettings (RELAUNCH_DATABASE_URL, RELAUNCH_NATS_URL).
    """

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_API_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url", "database_url")
    """Postgres: the ledger it serves; NATS: the live event stream."""

    host: str = "127.0.0.1"
    """Address the HTTP API listens on."""
    port: int = 14080
    """Port the HTTP API listens on (/healthz and /metrics are served here too)."""
    url: str = ""
    """Ignored here: the CLI's RELAUNCH_API_URL shares this prefix."""
    token_file: str = ""
    """Path of a file holding the bearer token that endpoints which change state require (a mounted
    Kubernetes Secret's file works; it is re-read when it changes, so a rotated Secret needs no restart).
    Empty (the default): those endpoints answer 503 and nothing can change state through the API.
    The token itself is never taken from the command line or from an environment variable, where
    `ps` and /proc/<pid>/environ would show it."""
    cors_origins: list[str] = []
    """Browser origins allowed to call the API from another site (JSON list, e.g. '["https://ops.example"]').
    Empty (the default) turns CORS off: only the dashboard served by the API itself can call it."""
    event_heartbeat_s: float = 15.0
    """Seconds between keep-alive comments on /v1/events/stream: keeps proxies from closing a quiet
    stream, and is how a vanished client is noticed."""
    goodput_refresh_s: float = 60.0
    """Seconds between refreshes of the fleet's goodput gauges on /metrics (relaunch_fleet_*: ETTR, lost time
    by part and fault class, MTTR, failures per 1,000 node-hours; docs/goodput.md), read from the ledger.
    0 turns them off."""
    goodput_window_s: float = 86400.0
    """The window those gauges cover: the jobs active in it, the failures detected in it (one day)."""
    event_streams_max: int = 64
    """Live /v1/events/stream connections served at once; each holds a JetStream consumer. Past it: 503."""
