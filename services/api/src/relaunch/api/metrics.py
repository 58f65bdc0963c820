"""Prometheus metrics of the API itself (the counters of the other services live in their processes)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from relaunch.common import goodput
from relaunch.common.clock import utcnow

log = logging.getLogger(__name__)

REQUESTS = Counter("relaunch_api_requests_total", "HTTP requests answered, by route template and status",
                   ["method", "route", "status"])
LATENCY = Histogram("relaunch_api_request_seconds", "Time to the response's first byte, by route template",
                    ["route"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
EVENT_STREAMS = Gauge("relaunch_api_event_streams", "Live /v1/events/stream connections")
OVERRIDES = Counter("relaunch_api_mode_overrides_total", "Operator mode overrides recorded", ["mode"])
CLEARANCES = Counter("relaunch_api_node_clearances_total", "Operator clearances of a repaired node's record")
# The fleet's goodput over the last RELAUNCH_API_GOODPUT_WINDOW_S (docs/goodput.md), from the ledger.
FLEET_ETTR = Gauge("relaunch_fleet_ettr_ratio", "Effective training time ratio of the jobs active in the window: "
                   "their productive step time over their wall time since their first start")
FLEET_LOST = Gauge("relaunch_fleet_lost_seconds", "Training time lost to the failures in the window, by part "
                   "(recomputation, detection, recovery, startup, warmup) and fault class", ["part", "fault_class"])
FLEET_MTTR = Gauge("relaunch_fleet_mttr_seconds", "Mean time to repair of the failures in the window: detection + "
                   "recovery + start-up (failures whose three parts are known)")
FLEET_FAILURE_RATE = Gauge("relaunch_fleet_failures_per_1000_node_hours",
                           "Failures in the window per 1,000 node-hours the jobs ran in it")
FLEET_FAILURES = Gauge("relaunch_fleet_failures", "Failures (each attempt's first anomaly) in the window")


def set_goodput(view: dict[str, Any]) -> None:
    """The gauges from relaunch.api.domain.lost_time.fleet_view."""
    FLEET_ETTR.set(view["ettr"] if view["ettr"] is not None else float("nan"))
    FLEET_MTTR.set(view["mttr_s"] if view["mttr_s"] is not None else float("nan"))
    rate = view["failures_per_1000_node_hours"]
    FLEET_FAILURE_RATE.set(rate if rate is not None else float("nan"))
    FLEET_FAILURES.set(view["failures"])
    FLEET_LOST.clear()  # a class gone from the window is gone from the gauges
    for klass, parts in view["lost_by_class_s"].items():
        for part in goodput.PARTS:
            FLEET_LOST.labels(part, klass).set(parts.get(part, 0.0))


def goodput_refresher(ledger: Any, window_s: float):
    """One pass of the gauges' refresh (run by relaunch.common.periodic.every from the app's lifespan)."""
    async def refresh() -> None:
        now = utcnow()
        set_goodput(await ledger.goodput(now, now - dt.timedelta(seconds=window_s)))
    return refresh


class RequestMetrics:
    """Pure ASGI middleware (no BaseHTTPMiddleware: it would buffer and break the event stream).

    Labels use the route template (/v1/jobs/{cluster}/{job_id}), never the raw path: job ids would
    make the label set grow without bound.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def observe(message) -> None:
            if message["type"] == "http.response.start":
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                REQUESTS.labels(scope["method"], route, str(message["status"])).inc()
                LATENCY.labels(route).observe(time.perf_counter() - start)
            await send(message)

        await self.app(scope, receive, observe)
