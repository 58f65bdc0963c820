"""Composition root of the notifier: three durable consumers (audit entries, reconcile statuses,
dead letters) pulled a batch at a time, posted to the routes' webhooks (docs/notifications.md)."""

from __future__ import annotations

import asyncio
import logging

from relaunch.common import consumers
from relaunch.common.connection import Bus
from relaunch.common.ingest import consume_batch
from relaunch.common.service import bootstrap, run_main, run_service

from .adapters.webhook import Webhooks
from .dispatch import Dispatcher
from .route_file import RoutesFileError, load_routes
from .settings import NotifierSettings

log = logging.getLogger(__name__)


async def amain() -> None:
    common, settings = bootstrap("notifier", NotifierSettings)
    routes = load_routes(settings.routes_file)  # validated before anything connects
    if routes:
        log.info("routes: %s", "; ".join(f"{r.name} ({', '.join(r.events)})" for r in routes))
    else:
        log.warning("no routes (RELAUNCH_NOTIFIER_ROUTES_FILE is empty): events are acked and posted nowhere")
    bus = await Bus.connect(common.nats_url, "notifier")
    webhooks = Webhooks()
    dispatcher = Dispatcher(routes, webhooks, settings.retry_base_s, settings.retry_max_s)
    handlers = {consumers.NOTIFIER_AUDIT: dispatcher.on_audit, consumers.NOTIFIER_RECONCILE: dispatcher.on_reconcile,
                consumers.NOTIFIER_DLQ: dispatcher.on_dead_letter}

    def tasks(stop: asyncio.Event):
        return [consume_batch(bus, consumer, handlers[consumer], stop) for consumer in consumers.of("notifier")]

    async def on_stop() -> None:
        await bus.close()
        await webhooks.close()

    await run_service("notifier", settings.health_port, {"nats": lambda: bus.connected}, tasks, on_stop,
                      health_host=common.health_host)


def main() -> None:
    run_main("notifier", amain, (RoutesFileError,))
