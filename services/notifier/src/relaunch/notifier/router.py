"""The notifier's consumers for the AsyncAPI document (declared once in relaunch.common.consumers;
pulled by the ingest engine, relaunch.common.ingest, a batch at a time, not by FastStream)."""

from __future__ import annotations

from faststream.nats import NatsRouter

from relaunch.common import consumers
from relaunch.common.serving import route


def router() -> NatsRouter:
    r = NatsRouter()
    for consumer in consumers.of("notifier"):
        route(r, consumer)
    return r
