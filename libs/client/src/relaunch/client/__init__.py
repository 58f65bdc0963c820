"""relaunch.client: the public SDK (event subscription for custom consumers) and the `relaunch` CLI."""

from .events import decode, subscribe

__all__ = ["decode", "subscribe"]
