"""Composition root of the actuator: observer + reconciler in one process."""

from __future__ import annotations

import asyncio
import functools

from relaunch.common import subjects
from relaunch.common.bus import Bus, consume
from relaunch.common.schemas import Advice
from relaunch.common.service import run_service, setup_logging
from relaunch.common.settings import CommonSettings, load_settings

from .adapters.slurm import Slurm
from .handlers import Observer, Reconciler, handle_advice
from .settings import ActuatorSettings


async def amain() -> None:
    common = load_settings(CommonSettings)
    settings = load_settings(ActuatorSettings)
    setup_logging("actuator", common.log_level)
    bus = await Bus.connect(common.nats_url, "actuator")
    slurm = Slurm(timeout_s=settings.slurm_timeout_s)
    observer = Observer(bus, slurm, common.cluster, settings.poll_interval_s)
    reconciler = Reconciler(bus, slurm, settings.mode)

    def tasks(stop: asyncio.Event):
        return [
            observer.run(stop),
            consume(bus, subjects.ACTUATOR_ADVICE, Advice, functools.partial(handle_advice, reconciler), stop),
        ]

    await run_service("actuator", settings.health_port, {"nats": lambda: bus.connected}, tasks, bus.close)


def main() -> None:
    asyncio.run(amain())
