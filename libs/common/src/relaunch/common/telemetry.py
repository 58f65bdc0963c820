"""Traces: W3C trace context travels in NATS headers, so one recovery is one trace from the anomaly
to CONVERGED (detector -> decider -> outbox -> actuator -> decider). The only OpenTelemetry importer.

Spans are created by the bus layer (one per consumed message, a child of the context in its headers)
and the context is injected into every publish. OTLP/HTTP export is on when an endpoint is
configured (RELAUNCH_OTLP_ENDPOINT, e.g. http://collector:4318/v1/traces); otherwise spans are made
but not exported (cheap), which is also what tests use with an in-memory exporter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger(__name__)
TRACEPARENT = "traceparent"


def setup_tracing(service: str, otlp_endpoint: str = "") -> None:
    """Install the process-wide tracer provider (once; a second call keeps the first)."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": f"relaunch-{service}"}))
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
        log.info("exporting traces to %s", otlp_endpoint)
    trace.set_tracer_provider(provider)


def tracer() -> trace.Tracer:
    return trace.get_tracer("relaunch")


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add the current trace context (if any) to outgoing headers."""
    propagate.inject(headers)
    return headers


def extract(headers: Mapping[str, str] | None) -> Context:
    return propagate.extract(dict(headers or {}))


def current_traceparent() -> str | None:
    """The current context as a traceparent value (kept with an outbox row, sent later)."""
    return inject({}).get(TRACEPARENT)


@contextmanager
def consumer_span(name: str, headers: Mapping[str, str] | None, subject: str) -> Iterator[trace.Span]:
    """A span for handling one consumed message, child of the context its publisher sent, and
    current while the handler runs (so the handler's publishes carry it on)."""
    span = tracer().start_span(name, context=extract(headers), kind=trace.SpanKind.CONSUMER,
                               attributes={"messaging.destination": subject})
    token = attach(trace.set_span_in_context(span))
    try:
        yield span
    finally:
        span.end()
        detach(token)
