"""Composition root of the watchdog process: settings, the bus, Slurm and the hold registry, the sweep."""

from __future__ import annotations

import asyncio
import logging

from relaunch.common.connection import Bus
from relaunch.common.service import run_service, setup_logging
from relaunch.common.settings import CommonSettings, SettingsError, load_settings, require_backends
from relaunch.common.telemetry import setup_tracing

from ..adapters.coordination import HoldRegistry
from ..slurm_access import slurm_adapter
from .settings import WatchdogSettings
from .sweeping import Watchdog

log = logging.getLogger(__name__)


async def amain() -> None:
    common = load_settings(CommonSettings)
    settings = load_settings(WatchdogSettings)
    require_backends(common, WatchdogSettings)
    setup_logging("watchdog", common.log_level)
    setup_tracing("watchdog", common.otlp_endpoint, common.trace_file)
    bus = await Bus.connect(common.nats_url, "watchdog")
    holds = HoldRegistry(bus.js, common.nats_replicas)
    watchdog = Watchdog(bus, slurm_adapter(common), holds, settings.mode, settings.bound_s)
    log.info("watchdog starting in %s mode, bound %.0f s", settings.mode, settings.bound_s)
    await run_service("watchdog", settings.health_port, {"nats": lambda: bus.connected},
                      lambda stop: [watchdog.run(stop, settings.interval_s)], bus.close,
                      health_host=common.health_host)


def main() -> None:
    try:
        asyncio.run(amain())
    except SettingsError as exc:  # one line naming the variable, not a traceback (exit status 1)
        raise SystemExit(f"relaunch watchdog: {exc}") from None

