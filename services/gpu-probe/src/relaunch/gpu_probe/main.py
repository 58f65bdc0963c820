"""Composition root of gpu-probe: one process per node, publishing NodeHealth on an interval."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from relaunch.common import subjects
from relaunch.common.bus import Bus, utcnow
from relaunch.common.schemas import NodeHealth, validate_name
from relaunch.common.service import run_service, setup_logging
from relaunch.common.settings import CommonSettings, SettingsError, load_settings

from .adapters.fake_nvml import FakeNvml
from .domain.classification import classify
from .settings import ProbeSettings

log = logging.getLogger(__name__)


async def amain(node_arg: str | None) -> None:
    common = load_settings(CommonSettings)
    if node_arg:
        os.environ["RELAUNCH_PROBE_NODE"] = node_arg
    settings = load_settings(ProbeSettings)
    try:
        node = validate_name(settings.node)
    except ValueError as exc:
        raise SettingsError(f"set the node with --node NAME or RELAUNCH_PROBE_NODE: {exc}") from exc
    if settings.backend != "fake":
        raise SettingsError("only the fake backend exists yet (RELAUNCH_PROBE_BACKEND=fake); NVML is issue 6")
    setup_logging(f"gpu-probe[{node}]", common.log_level)
    backend = FakeNvml(settings.expected_gpus)
    bus = await Bus.connect(common.nats_url, f"gpu-probe-{node}")

    async def publish_loop(stop: asyncio.Event) -> None:
        while not stop.is_set():
            readings = backend.read()
            verdict, reasons = classify(readings, settings.expected_gpus)
            health = NodeHealth(cluster=common.cluster, node=node, verdict=verdict, reasons=reasons, gpus=readings,
                                backend=backend.backend, at=utcnow())
            try:
                await bus.publish(subjects.signal_node(common.cluster, node), health)
            except Exception as exc:  # the bus is down: keep sampling, publish when it is back
                log.warning("cannot publish node health: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), timeout=settings.interval_s)
            except TimeoutError:
                pass

    await run_service(f"gpu-probe-{node}", settings.health_port, {"nats": lambda: bus.connected},
                      lambda stop: [publish_loop(stop)], bus.close)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m relaunch.gpu_probe")
    parser.add_argument("--node", help="Slurm node name (or RELAUNCH_PROBE_NODE)")
    args = parser.parse_args()
    asyncio.run(amain(args.node))
