"""Composition root of the detector."""

from __future__ import annotations

import asyncio

from relaunch.common import subjects
from relaunch.common.bus import Bus, consume
from relaunch.common.schemas import JobObserved, LogBatch
from relaunch.common.service import run_service, setup_logging
from relaunch.common.settings import CommonSettings, load_settings

from .adapters.hotstate import HotState
from .domain.signatures import load_catalogue
from .handlers import Detector, Follower
from .settings import DetectorSettings


async def amain() -> None:
    common = load_settings(CommonSettings)
    settings = load_settings(DetectorSettings)
    setup_logging("detector", common.log_level)
    catalogue = load_catalogue(settings.extra_signatures)
    bus = await Bus.connect(common.nats_url, "detector")
    state = HotState(common.redis_url)
    follower = Follower(bus, state, common.cluster, settings.follow_interval_s, settings.batch_bytes)
    detector = Detector(bus, state, follower, catalogue, settings.failure_grace_s)
    redis_ok = {"value": True}

    async def watch_redis(stop: asyncio.Event) -> None:
        while not stop.is_set():
            redis_ok["value"] = await state.ping()
            await asyncio.sleep(2)

    def tasks(stop: asyncio.Event):
        return [
            follower.run(stop),
            watch_redis(stop),
            consume(bus, subjects.DETECTOR_LOGS, LogBatch, detector.on_log, stop),
            consume(bus, subjects.DETECTOR_JOBS, JobObserved, detector.on_job, stop),
        ]

    async def on_stop() -> None:
        await bus.close()
        await state.close()

    await run_service("detector", settings.health_port,
                      {"nats": lambda: bus.connected, "redis": lambda: redis_ok["value"]}, tasks, on_stop)


def main() -> None:
    asyncio.run(amain())
