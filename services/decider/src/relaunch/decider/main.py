"""Composition root of the decider."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from relaunch.common import consumers
from relaunch.common.connection import Bus
from relaunch.common.periodic import every
from relaunch.common.serving import serve
from relaunch.common.policies.policy_file import load_policies
from relaunch.common.policies.policy_set import PolicyFileError
from relaunch.common.health import Reachability
from relaunch.common.service import bootstrap, run_main, run_service

from .adapters.ledger import Ledger
from .handlers import Decider
from .outbox import OutboxPublisher
from .router import router
from .settings import DeciderSettings

log = logging.getLogger(__name__)


async def amain() -> None:
    common, settings = bootstrap("decider", DeciderSettings)
    # Validated before anything connects: a bad policy file is an operator's mistake to fix, not a retry.
    policies = load_policies(settings.policy_file)
    log.info("policies from %s: %s (default %s)", policies.source, ", ".join(policies.names()), policies.default)
    ledger = await Ledger.connect(common.database_url)
    applied = await ledger.migrate()
    if applied:
        log.info("applied ledger migrations %s", applied)
    bus = await Bus.connect(common.nats_url, "decider")
    outbox = OutboxPublisher(bus, ledger, settings.outbox_interval_s)
    decider = Decider(ledger, outbox, policies, dt.timedelta(seconds=settings.node_history_half_life_s),
                      hang_evidence_wait=dt.timedelta(seconds=settings.hang_evidence_wait_s))
    db = Reachability("Postgres (RELAUNCH_DATABASE_URL, the ledger)", common.database_url)

    async def watch_db(stop: asyncio.Event) -> None:
        async def check() -> None:
            db.record(await ledger.ping())
        await every(2, check, stop)

    await serve(bus, router(decider, bus.inbox_prefix), consumers.of("decider"))

    def tasks(stop: asyncio.Event):
        return [outbox.run(stop), watch_db(stop)]

    async def on_stop() -> None:
        await bus.close()
        await ledger.close()

    await run_service("decider", settings.health_port,
                      {"nats": lambda: bus.connected, "postgres": lambda: db.reachable}, tasks, on_stop,
                      health_host=common.health_host)


def main() -> None:
    run_main("decider", amain, (PolicyFileError,))
