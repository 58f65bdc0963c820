"""Prometheus metrics of the API itself (the counters of the other services live in their processes)."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("relaunch_api_requests_total", "HTTP requests answered, by route template and status",
                   ["method", "route", "status"])
LATENCY = Histogram("relaunch_api_request_seconds", "Time to the response's first byte, by route template",
                    ["route"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
EVENT_STREAMS = Gauge("relaunch_api_event_streams", "Live /v1/events/stream connections")
OVERRIDES = Counter("relaunch_api_mode_overrides_total", "Operator mode overrides recorded", ["mode"])
CLEARANCES = Counter("relaunch_api_node_clearances_total", "Operator clearances of a repaired node's record")


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
