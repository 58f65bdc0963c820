"""gpu-probe's bus wiring: sample -> classify -> publish NodeHealth, the XID watcher, fault injection.

Publishing (docs/events.md, `relaunch.signal.node.<cluster>.<node>`):
- every `interval_s`: these publications are also the probe's heartbeats (NodeHealth.interval_s tells
  consumers the period), so a node whose probe falls silent is noticed and becomes evidence;
- at once when the backend reports an XID (trigger "xid") or a fault is injected (trigger "inject").

Answering (relaunch.gpu_probe.router): `answer_injection` is the handler of the declared responder
`relaunch.common.consumers.PROBE_INJECT`, on this node's `relaunch.control.inject.<cluster>.<node>`.

Concurrency: one task (`publish_loop`) samples and publishes, so samples never overlap; the XID
watcher and the injection handler only record what happened and wake it. The XID memory is touched
only on the event loop thread (the blocking NVML calls run in worker threads and hand back values).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.clock import utcnow
from relaunch.common.periodic import every, pause
from relaunch.common.schemas import FaultInjection, InjectionAck, NodeHealth

from .domain.classification import Rules, classify
from .domain.samples import GpuBackend, Injectable, XidEvent
from .domain.xids import remember

log = logging.getLogger(__name__)

PUBLISHED = Counter("relaunch_probe_publications_total", "NodeHealth messages published", ["trigger", "verdict"])
SAMPLE_SECONDS = Histogram("relaunch_probe_sample_seconds", "Wall time of one GPU sample",
                           buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5))
INJECTIONS = Counter("relaunch_probe_injections_total", "Fault injection requests answered", ["accepted"])

MIN_GAP_S = 0.2
"""Least time between two immediate (XID or injection) publications: an XID storm is coalesced into
a few messages instead of one per event; the interval heartbeat is unaffected."""
_PRIORITY = {"interval": 0, "inject": 1, "xid": 2}


def _xid_wait_failed(exc: Exception) -> float:
    """Never let the XID watcher die (the interval samples go on regardless): wait a second, go on."""
    log.error("waiting for XID events failed", exc_info=exc)
    return 1.0


@dataclass(frozen=True)
class ProbeConfig:
    cluster: str
    node: str
    expected_gpus: int
    interval_s: float
    event_wait_s: float = 0.5
    rules: Rules = Rules()


class Probe:
    def __init__(self, bus: Bus, backend: GpuBackend, config: ProbeConfig,
                 clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.bus, self.backend, self.config, self._clock = bus, backend, config, clock
        self._xids: tuple[XidEvent, ...] = ()
        self._wake = asyncio.Event()
        self._pending = "interval"
        self._seq = 0
        self._last_sample = time.monotonic()

    def tasks(self, stop: asyncio.Event) -> list[Awaitable[None]]:
        return [self.publish_loop(stop), self.watch_xids(stop)]

    def sampling_ok(self) -> bool:
        """Health check: the probe sampled recently (a hung NVML call would stop it)."""
        return time.monotonic() - self._last_sample < 3 * self.config.interval_s + 5

    # -- publishing -----------------------------------------------------------------------------

    async def publish_loop(self, stop: asyncio.Event) -> None:
        trigger = "start"

        async def publish_then_wait() -> None:  # the wait is in the pass: it decides the next trigger
            nonlocal trigger
            started = time.monotonic()
            await self.publish_once(trigger)
            trigger = await self._next_trigger(stop, started)

        await every(0, publish_then_wait, stop)

    async def _next_trigger(self, stop: asyncio.Event, started: float) -> str:
        await pause(stop, started + self.config.interval_s - time.monotonic(), wake=self._wake)
        if not self._wake.is_set():
            return "interval"
        await asyncio.sleep(max(started + MIN_GAP_S - time.monotonic(), 0))
        self._wake.clear()
        trigger, self._pending = self._pending, "interval"
        return trigger

    def _request(self, trigger: str) -> None:
        if _PRIORITY[trigger] > _PRIORITY[self._pending]:
            self._pending = trigger
        self._wake.set()

    async def publish_once(self, trigger: str = "interval") -> NodeHealth:
        """Sample, classify and publish one NodeHealth; never raises for a GPU or bus fault."""
        health = await self._assess(trigger)
        PUBLISHED.labels(trigger, health.verdict).inc()
        try:
            await self.bus.publish(subjects.signal_node(self.config.cluster, self.config.node), health)
        except Exception as exc:  # the bus is down: keep sampling, publish when it is back
            log.warning("cannot publish node health: %s", exc)
        return health

    async def _assess(self, trigger: str) -> NodeHealth:
        cfg = self.config
        t0 = time.perf_counter()
        sample, error = None, ""
        try:
            # In a thread: NVML calls on a failing GPU can block for seconds.
            sample = await asyncio.to_thread(self.backend.sample)
        except Exception as exc:  # a bug, not a GPU fault: say so in the heartbeat instead of going silent
            log.exception("sampling the GPUs failed")
            error = f"{type(exc).__name__}: {exc}"
        SAMPLE_SECONDS.observe(time.perf_counter() - t0)
        self._last_sample = time.monotonic()
        now = self._clock()
        self._xids = remember(self._xids, (), now, cfg.rules.xid_window)
        self._seq += 1
        common = dict(cluster=cfg.cluster, node=cfg.node, backend=self.backend.backend, at=now, trigger=trigger,
                      interval_s=cfg.interval_s, seq=self._seq, expected_gpus=cfg.expected_gpus)
        if sample is None:
            return NodeHealth(**common, verdict="degraded", reasons=[f"the probe could not read the GPUs: {error}"])
        a = classify(sample, self._xids, cfg.expected_gpus, now, cfg.rules)
        return NodeHealth(**common, verdict=a.verdict, reasons=list(a.reasons), notes=list(a.notes),
                          gpus=list(a.gpus), xids=list(a.xids), gpu_count=sample.gpu_count)

    # -- XIDs -----------------------------------------------------------------------------------

    async def watch_xids(self, stop: asyncio.Event) -> None:
        await every(0, self._wait_xids, stop, on_error=_xid_wait_failed)

    async def _wait_xids(self) -> None:
        # Bounded wait in a thread, so stopping never waits longer than event_wait_s.
        events = await asyncio.to_thread(self.backend.wait_xids, self.config.event_wait_s)
        if events:
            self.record_xids(events)

    def record_xids(self, events: list[XidEvent]) -> None:
        """Remember XIDs the backend reported and publish at once."""
        log.warning("XID events: %s", ", ".join(f"GPU {e.gpu} XID {e.code}" for e in events))
        self._xids = remember(self._xids, events, self._clock(), self.config.rules.xid_window)
        self._request("xid")

    # -- fault injection ------------------------------------------------------------------------

    def answer_injection(self, data: bytes) -> InjectionAck:
        """The reply to one inject request (the raw body): counted by whether it was accepted."""
        ack = self.handle_injection(data)
        INJECTIONS.labels(str(ack.accepted).lower()).inc()
        return ack

    def handle_injection(self, data: bytes) -> InjectionAck:
        cfg = self.config

        def answer(accepted: bool, detail: str) -> InjectionAck:
            return InjectionAck(cluster=cfg.cluster, node=cfg.node, accepted=accepted, detail=detail,
                                backend=self.backend.backend, at=self._clock())

        try:
            request = FaultInjection.model_validate_json(data)
        except ValidationError as exc:
            return answer(False, f"not a valid FaultInjection: {exc.errors()[0]['msg']}")
        if (request.cluster, request.node) != (cfg.cluster, cfg.node):
            return answer(False, f"this probe is {cfg.cluster}/{cfg.node}, not {request.cluster}/{request.node}")
        if not isinstance(self.backend, Injectable):
            return answer(False, f"this probe reads real GPUs (backend {self.backend.backend}); "
                                 "faults can only be injected into the fake backend")
        try:
            detail = self.backend.inject(request)
        except ValueError as exc:
            return answer(False, str(exc))
        log.warning("injected fault: %s", detail)
        if request.fault == "clear":
            self._xids = ()
        # An injected XID comes back through wait_xids like a real one (trigger "xid"); the rest are states.
        if request.fault != "xid":
            self._request("inject")
        return answer(True, detail)
