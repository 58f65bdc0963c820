"""Composition root of the detector."""

from __future__ import annotations

import asyncio
import gc

from relaunch.common import consumers
from relaunch.common.connection import Bus
from relaunch.common.periodic import every
from relaunch.common.ingest import consume_batch, consume_each, handled_until
from relaunch.common.serving import serve
from relaunch.common.diagnosis.signatures import load_catalogue
from relaunch.common.health import Reachability
from relaunch.common.health import readable_dirs
from relaunch.common.service import bootstrap, run_main, run_service

from .adapters.allocator import fix_mmap_threshold
from .adapters.follower import Follower
from .adapters.progress_keys import ProgressKeys
from .binding import ProgressBinding
from .adapters.hotstate import HotState
from .anomalies import AnomalyPublisher
from .domain import hangs, stragglers
from .handlers import Detector
from .node_watch import LostNodeWatch
from .rebuilding import HotStateRebuilder
from .adapters.progress_store import ProgressStore
from .history_recorder import ProgressHistory
from .router import router
from .settings import DetectorSettings
from .tracking import ProgressTracker


async def amain() -> None:
    common, settings = bootstrap("detector", DetectorSettings)
    fix_mmap_threshold(settings.malloc_mmap_threshold)
    catalogue = load_catalogue(settings.extra_signatures)
    bus = await Bus.connect(common.nats_url, "detector")
    state = HotState(common.redis_url)
    async def progress_read_until(now: float) -> float:
        # Progress arrives as progress signals and as log lines: silence is judged up to what both say.
        return min(await handled_until(bus, consumers.DETECTOR_PROGRESS, now),
                   await handled_until(bus, consumers.DETECTOR_LOGS, now))

    follower = Follower(bus, state, common.cluster, settings.follow_interval_s, settings.batch_bytes,
                        settings.quiet_follow_interval_s, settings.cold_follow_interval_s,
                        log_roots=settings.log_root_list())
    anomalies = AnomalyPublisher(bus, state)  # crashes, hangs and stragglers all leave through it
    tracker = ProgressTracker(bus, state, common.cluster,
                              hangs.HangPolicy(floor_s=settings.hang_floor_s, warmup_s=settings.hang_warmup_s),
                              stragglers.StragglerPolicy(fraction=settings.straggler_fraction),
                              sweep_s=settings.hang_sweep_s, handled_until=progress_read_until,
                              cache_jobs=settings.state_cache_jobs, anomalies=anomalies, last_look=follower.read_job)
    anomalies.progress = tracker.progress_of  # a failure's last progress, a fact of the ledger (docs/goodput.md)
    history = ProgressHistory(ProgressStore(common.redis_url), common.cluster)
    detector = Detector(bus, state, follower, catalogue, settings.failure_grace_s, tracker, anomalies, history)

    binding = ProgressBinding(ProgressKeys(state), common.cluster, required=settings.progress_keys == "required")
    detector.binding = binding

    async def track_and_keep(items):
        results = await tracker.on_progress_batch(items)
        await history.on_reports([item for item, result in zip(items, results) if result is None])
        return results
    on_progress_batch = binding.wrap(track_and_keep)
    rebuilder = HotStateRebuilder(bus, state, common.cluster, detector.on_job)
    redis = Reachability("Redis (RELAUNCH_REDIS_URL, the detector's hot state)", common.redis_url)

    async def watch_redis(stop: asyncio.Event) -> None:
        async def check() -> None:
            redis.record(await state.ping())
        await every(2, check, stop)

    # Job observations on FastStream (the router); log batches and progress on the ingest engine.
    async def nodes_read_until(now: float) -> float:
        return min(await progress_read_until(now), await handled_until(bus, consumers.DETECTOR_NODES, now))

    nodes = LostNodeWatch(state, anomalies, tracker, common.cluster, sweep_s=settings.hang_sweep_s,
                          read_until=nodes_read_until)
    await serve(bus, router(detector, bus.inbox_prefix, nodes), (consumers.DETECTOR_JOBS, consumers.DETECTOR_NODES))

    def tasks(stop: asyncio.Event):
        return [
            follower.run(stop),
            watch_redis(stop),
            # Different jobs' log batches and observations concurrently; one job's in order.
            consume_each(bus, consumers.DETECTOR_LOGS, detector.on_log, stop),
            # Three batches at once: one is computed while the others wait on Redis (the tracker keeps
            # each job's batches in order).
            consume_batch(bus, consumers.DETECTOR_PROGRESS, on_progress_batch, stop, concurrency=3),
            tracker.sweep(stop),
            nodes.sweep(stop),
            rebuilder.run(stop),
        ]

    async def on_stop() -> None:
        await bus.close()
        await state.close()
        await history.store.close()

    roots = settings.log_root_list()  # ready only while each can be read: a missing mount is no log read at all
    await run_service("detector", settings.health_port,
                      {"nats": lambda: bus.connected, "redis": lambda: redis.reachable, "log_roots": lambda: readable_dirs(roots, "RELAUNCH_DETECTOR_LOG_ROOTS")},
                      tasks, on_stop, health_host=common.health_host)


GC_THRESHOLDS = (100_000, 50, 1000)
"""The cyclic collector's thresholds in the detector (Python's default is 700, 10, 10). Progress
tracking makes a few short-lived tuples per report and keeps each job's state decoded (statecache):
with the defaults, collections that walk those states took a fifth of the detector's CPU at 10,000
reports a second. Reference counting still frees everything at once; only cyclic garbage waits longer."""


def main() -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()  # what start-up made (modules, the catalogue) lives as long as the process: never walk it
    run_main("detector", amain)
