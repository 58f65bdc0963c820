"""relaunch.client: the public SDK (event subscription for custom consumers) and the `relaunch` CLI."""

from .events import EventStream, decode, subscribe

__all__ = ["EventStream", "decode", "subscribe"]
