"""Composition root of the actuator: observer + reconciler in one process."""

from __future__ import annotations

import asyncio
import time
import functools
import logging
import os
import shutil
import socket
import sys
from pathlib import Path

from relaunch.common import consumers
from relaunch.common.connection import Bus
from relaunch.common.health import answered_within
from relaunch.common.periodic import every, warn_on
from relaunch.common.serving import consume
from relaunch.common.service import bootstrap, run_main, run_service

from .adapters.coordination import HoldRegistry, Lease
from .adapters.ratelimit import ActionRateLimit
from .handlers import Observer, Reconciler, handle_advice
from .hang_evidence import HangReader
from .settings import ActuatorSettings
from .slurm_access import slurm_adapter

log = logging.getLogger(__name__)


async def amain() -> None:
    common, settings = bootstrap("actuator", ActuatorSettings)
    bus = await Bus.connect(common.nats_url, "actuator")
    slurm = slurm_adapter(common, settings.slurm_timeout_s)
    instance = settings.instance or f"{socket.gethostname()}-{os.getpid()}"
    lease = Lease(bus.js, common.cluster, instance, settings.lease_ttl_s, settings.lease_renew_s,
                  common.nats_replicas)
    limit = ActionRateLimit(common.redis_url, common.cluster, settings.actions_per_minute, settings.actions_burst)
    observer = Observer(bus, slurm, common.cluster, settings.poll_interval_s, active=lambda: lease.is_leader,
                        history_window_s=settings.history_window_s)
    holds = HoldRegistry(bus.js, common.nats_replicas)
    reconciler = Reconciler(bus, slurm, settings.mode, holds, limit, frozenset(settings.partitions),
                            drain_nodes=settings.drain_nodes, down_lost_nodes=settings.down_lost_nodes,
                            fence=lambda: lease.is_leader)
    beside = Path(sys.executable).with_name("py-spy")
    pyspy = settings.pyspy or (str(beside) if beside.exists() else shutil.which("py-spy") or "py-spy")
    hangs = HangReader(bus, slurm, settings.mode, enabled=settings.hang_evidence,
                       python=settings.hang_evidence_python, pyspy=pyspy,
                       timeout_s=settings.hang_evidence_timeout_s)
    log.info("actuator %s starting in %s mode (partitions: %s; node drain %s)", instance, settings.mode,
             ", ".join(settings.partitions) or "all", "on" if settings.drain_nodes else "off")

    async def watch_redis(stop: asyncio.Event) -> None:
        await every(2, limit.ping, stop)

    slurm_seen = [time.monotonic()]

    async def watch_slurm(stop: asyncio.Event) -> None:
        async def check() -> None:
            now = time.monotonic()
            if await slurm.reachable():
                slurm_seen[0] = now
            elif lease.is_leader and now - slurm_seen[0] > settings.slurm_lost_s:
                await lease.step_down(settings.step_down_s,
                                      f"slurmctld has not answered for {now - slurm_seen[0]:.0f} s")
        # A check that fails unexpectedly is logged and counts as no answer; it never ends the actuator.
        await every(2, check, stop, on_error=warn_on(log, "Slurm reachability check failed: %s", kinds=(Exception,)))

    def tasks(stop: asyncio.Event):
        return [
            lease.run(stop),
            watch_redis(stop),
            watch_slurm(stop),
            observer.run(stop),
            # A FastStream subscriber that runs only while this actuator holds the lease.
            consume(bus, consumers.ACTUATOR_ADVICE, functools.partial(handle_advice, reconciler), stop,
                    active=lambda: lease.is_leader),
            consume(bus, consumers.ACTUATOR_HANGS, hangs.on_anomaly, stop, active=lambda: lease.is_leader),
        ]

    async def on_stop() -> None:
        await bus.close()
        await limit.close()

    def slurm_answers() -> tuple[bool, str]:
        """Ready only while Slurm answers through the chosen adapter: a rollout whose actuator cannot reach
        slurmctld is not healthy, since nothing can be restarted (docs/operator-guide.md, "Health and logs")."""
        return answered_within(slurm_seen[0], time.monotonic(), settings.slurm_lost_s,
                               f"slurmctld (through the {common.slurm_api} adapter)")

    checks = {"nats": lambda: bus.connected, "redis": lambda: limit.redis.reachable, "slurm": slurm_answers}
    await run_service("actuator", settings.health_port, checks, tasks, on_stop,
                      health_host=common.health_host)


def main() -> None:
    run_main("actuator", amain)
