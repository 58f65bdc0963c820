"""relaunch.client: the public SDK (event subscription for custom consumers) and the `relaunch` CLI."""

from .events import EventStream, decode, subscribe
from .progress import ProgressReporter, report_progress

__all__ = ["EventStream", "ProgressReporter", "decode", "report_progress", "subscribe"]
