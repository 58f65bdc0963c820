"""relaunch.client: the public SDK (event subscription and connections for custom consumers) and the `relaunch` CLI.

The SDK's names are imported at first use (PEP 562), not with the package: every module of the CLI
imports this package first, and `relaunch classify`, whose start-up is benchmarked, needs neither
NATS nor pydantic (entry.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .consumer import broker, connect, decoder, pull_inbox
    from .events import EventStream, decode, subscribe
    from .progress import ProgressReporter, report_checkpoint, report_progress

__all__ = ["EventStream", "ProgressReporter", "broker", "connect", "decode", "decoder", "pull_inbox",
           "report_checkpoint", "report_progress", "subscribe"]
_HOME = {"EventStream": "events", "decode": "events", "subscribe": "events",
         "broker": "consumer", "connect": "consumer", "decoder": "consumer", "pull_inbox": "consumer",
         "ProgressReporter": "progress", "report_progress": "progress",
         "report_checkpoint": "progress"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value
