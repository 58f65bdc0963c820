"""Composition root of gpu-probe: one process per node, publishing NodeHealth on an interval
(heartbeats) and at once on an XID. `python -m relaunch.gpu_probe --node NAME`."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import logging
import os
import sys

from relaunch.common.connection import Bus
from relaunch.common.schemas import validate_name
from relaunch.common.service import bootstrap, run_service
from relaunch.common.settings import CommonSettings, SettingsError

from .adapters.fake_nvml import FakeNvml
from .domain.classification import Rules
from .domain.samples import BackendUnavailable, GpuBackend
from .handlers import Probe, ProbeConfig
from .router import router
from .settings import ProbeSettings

log = logging.getLogger(__name__)


def check_backend(settings: ProbeSettings) -> None:
    """Refuse the fake backend unless it was asked for by name and confirmed (ProbeSettings.allow_fake):
    on a real node it would report invented healthy GPUs and let `relaunch inject` fail the node."""
    if settings.backend == "fake" and not settings.allow_fake:
        raise SettingsError(
            "RELAUNCH_PROBE_BACKEND=fake reports invented GPU readings and obeys `relaunch inject` (whoever may "
            "send it can mark this node failed): it is for the local stack and tests only. On a GPU node unset "
            "RELAUNCH_PROBE_BACKEND (the default is nvml); on a machine without GPUs that runs a demo, set "
            "RELAUNCH_PROBE_ALLOW_FAKE=1 as well to confirm (docs/operator-guide.md, \"gpu-probe\").")


def make_backend(settings: ProbeSettings) -> GpuBackend:
    """The backend the settings name; raises BackendUnavailable when NVML cannot start and
    SettingsError for a fake backend that was not confirmed (check_backend)."""
    check_backend(settings)
    if settings.backend == "fake":
        return FakeNvml(settings.expected_gpus)
    # Imported here so that the fake stack never loads the NVML bindings.
    from .adapters.nvml import NvmlBackend

    return NvmlBackend()


def probe_config(cluster: str, node: str, settings: ProbeSettings) -> ProbeConfig:
    rules = dataclasses.replace(Rules(), xid_window=dt.timedelta(seconds=settings.xid_window_s),
                                app_xid_repeat=settings.app_xid_repeat)
    return ProbeConfig(cluster=cluster, node=node, expected_gpus=settings.expected_gpus,
                       interval_s=settings.interval_s, event_wait_s=settings.event_wait_s, rules=rules)


def logged_as(common: CommonSettings, settings: ProbeSettings) -> str:
    """gpu-probe[NODE], once the node and the cluster are valid names (SettingsError says how to set them)."""
    try:
        validate_name(settings.node)
        validate_name(common.cluster)
    except ValueError as exc:
        raise SettingsError(f"set the node with --node NAME or RELAUNCH_PROBE_NODE, and RELAUNCH_CLUSTER: {exc}") \
            from exc
    return f"gpu-probe[{settings.node}]"


async def amain(node_arg: str | None) -> None:
    if node_arg:
        os.environ["RELAUNCH_PROBE_NODE"] = node_arg
    common, settings = bootstrap("gpu-probe", ProbeSettings, logged_as)
    node, cluster = settings.node, common.cluster
    backend = make_backend(settings)  # before connecting: a node without NVML fails fast and says why
    bus = await Bus.connect(common.nats_url, f"gpu-probe-{node}")
    probe = Probe(bus, backend, probe_config(cluster, node, settings))
    await bus.serve(router(probe))  # answers this node's inject requests from here on
    log.info("gpu-probe for %s/%s: backend %s, %d GPUs expected, every %.1fs", cluster, node, backend.backend,
             settings.expected_gpus, settings.interval_s)

    async def on_stop() -> None:
        await bus.close()
        backend.close()

    await run_service(f"gpu-probe-{node}", settings.health_port,
                      {"nats": lambda: bus.connected, "sampling": probe.sampling_ok}, probe.tasks, on_stop,
                      health_host=common.health_host)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m relaunch.gpu_probe")
    parser.add_argument("--node", help="Slurm node name (or RELAUNCH_PROBE_NODE)")
    args = parser.parse_args()
    try:
        asyncio.run(amain(args.node))
    except (SettingsError, BackendUnavailable) as exc:
        print(f"gpu-probe: {exc}", file=sys.stderr)
        sys.exit(2)
