"""Traces: W3C trace context travels in NATS headers, so one recovery is one trace from the anomaly
to CONVERGED (detector -> decider -> outbox -> actuator -> decider). The only OpenTelemetry importer.

Spans are created by the bus layer (one per consumed message, a child of the context in its headers)
and the context is injected into every publish. OTLP/HTTP export is on when an endpoint is
configured (RELAUNCH_OTLP_ENDPOINT, e.g. http://collector:4318/v1/traces); otherwise spans are made
but not exported (cheap), which is also what tests use with an in-memory exporter.

RELAUNCH_TRACE_FILE=path writes one JSON line per finished span to a file as well (no collector
needed: enough to read one recovery's trace on a head node, and what the end-to-end trace test
reads). `{service}` in the path becomes the service's name, so every service can be given the same
setting and still write its own file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .subjects import MSG_ID_HEADER

log = logging.getLogger(__name__)
TRACEPARENT = "traceparent"


def setup_tracing(service: str, otlp_endpoint: str = "", trace_file: str = "") -> None:
    """Install the process-wide tracer provider (once; a second call keeps the first)."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": f"relaunch-{service}"}))
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
        log.info("exporting traces to %s", otlp_endpoint)
    if trace_file:
        path = trace_file_path(trace_file, service)
        # Batched, so the handler that ends a span never waits for the disk.
        provider.add_span_processor(BatchSpanProcessor(SpanFileExporter(path), schedule_delay_millis=500))
        log.info("writing spans to %s", path)
    trace.set_tracer_provider(provider)


def trace_file_path(template: str, service: str) -> str:
    """`template` with `{service}` replaced by the service's name, made safe for a file name."""
    return template.replace("{service}", re.sub(r"[^A-Za-z0-9_.-]+", "_", service).strip("_"))


def span_record(span: ReadableSpan) -> dict:
    """One finished span as a JSON-able dict (ids in the hex form W3C traceparent uses)."""
    ctx = span.get_span_context()
    resource = span.resource.attributes if span.resource else {}
    start, end = span.start_time or 0, span.end_time or 0
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "name": span.name,
        "service": str(resource.get("service.name", "")),
        "kind": span.kind.name,
        "start_unix_ns": start,
        "end_unix_ns": end,
        "duration_ms": round((end - start) / 1e6, 3),
        "status": span.status.status_code.name,
        "attributes": {k: v if isinstance(v, (str, int, float, bool)) else list(v)
                       for k, v in (span.attributes or {}).items()},
    }


class SpanFileExporter(SpanExporter):
    """Appends one JSON line per finished span to a file (RELAUNCH_TRACE_FILE).

    Each batch is one write() on a file opened with O_APPEND, so several processes given the same
    path do not tear each other's lines; a failed write drops the batch and says so, never raises
    into the service."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = "".join(json.dumps(span_record(s), separators=(",", ":")) + "\n" for s in spans).encode()
        try:
            with self._lock:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
        except OSError as exc:
            log.warning("could not write %d span(s) to %s: %s", len(spans), self.path, exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


_TRACER: tuple[object, trace.Tracer] | None = None


def tracer() -> trace.Tracer:
    """relaunch's tracer from the global provider, made once per provider (trace.get_tracer makes a new
    one on every call: a fifth of the cost of a consumer's span, taken for every message)."""
    global _TRACER
    provider = trace.get_tracer_provider()
    if _TRACER is None or _TRACER[0] is not provider:
        _TRACER = (provider, provider.get_tracer("relaunch"))
    return _TRACER[1]


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
    attributes = {"messaging.destination": subject}
    msg_id = (headers or {}).get(MSG_ID_HEADER)
    if msg_id:  # names which message of a subject this was (e.g. an Advice's final ReconcileStatus)
        attributes["messaging.message.id"] = msg_id
    span = tracer().start_span(name, context=extract(headers), kind=trace.SpanKind.CONSUMER, attributes=attributes)
    token = attach(trace.set_span_in_context(span))
    try:
        yield span
    finally:
        span.end()
        detach(token)
