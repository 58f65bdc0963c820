from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class NotifierSettings(ServiceSettings):
    """RELAUNCH_NOTIFIER_* environment variables (docs/notifications.md)."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_NOTIFIER_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url",)
    """NATS only: its own durable consumers; the webhooks are named in the routes file."""

    routes_file: str = ""
    """TOML file of routes (docs/notifications.md "Routes"): where to post which events. Empty: no
    route, so every event is acked unposted (the notifier runs, and says so at start)."""
    retry_base_s: float = Field(2.0, gt=0)
    """Back-off after the first failed post of a message; doubled after each further one."""
    retry_max_s: float = Field(300.0, gt=0)
    """The longest wait between two tries of one message (a receiver down for an hour is tried
    every 5 minutes, and nothing is lost meanwhile: the message stays in its stream unacked)."""
