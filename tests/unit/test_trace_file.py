"""RELAUNCH_TRACE_FILE: one JSON line per finished span, parent links kept, one file per service."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

from relaunch.common import telemetry
from relaunch.common.settings import CommonSettings


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_spans_are_written_as_json_lines_with_their_parent(tmp_path):
    path = tmp_path / "deep" / "spans.jsonl"  # a missing folder is made
    provider = TracerProvider(resource=Resource.create({"service.name": "relaunch-detector"}))
    provider.add_span_processor(SimpleSpanProcessor(telemetry.SpanFileExporter(str(path))))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer") as outer:
        with tracer.start_as_current_span("inner"):
            pass
    inner, outer_rec = _lines(path)
    assert (inner["name"], outer_rec["name"]) == ("inner", "outer")
    assert inner["trace_id"] == outer_rec["trace_id"] == f"{outer.get_span_context().trace_id:032x}"
    assert inner["parent_span_id"] == outer_rec["span_id"] and outer_rec["parent_span_id"] is None
    assert inner["service"] == "relaunch-detector"
    assert 0 <= inner["duration_ms"] <= outer_rec["duration_ms"]
    assert outer_rec["end_unix_ns"] >= outer_rec["start_unix_ns"] > 0


def test_a_consumer_span_names_its_subject_and_message_id(tmp_path, monkeypatch):
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(telemetry.SpanFileExporter(str(path))))
    tracer = provider.get_tracer("test")
    monkeypatch.setattr(telemetry, "tracer", lambda: tracer)  # not the process-wide provider
    with tracer.start_as_current_span("publisher") as publisher:
        headers = telemetry.inject({"Nats-Msg-Id": "reconcile.c.1.1.final"})
    with telemetry.consumer_span("decider-reconcile ReconcileStatus", headers, "relaunch.event.reconcile.c.1"):
        pass
    _, consumer = _lines(path)
    assert consumer["kind"] == "CONSUMER"
    assert consumer["parent_span_id"] == f"{publisher.get_span_context().span_id:016x}"
    assert consumer["attributes"] == {"messaging.destination": "relaunch.event.reconcile.c.1",
                                      "messaging.message.id": "reconcile.c.1.1.final"}


def test_the_service_name_goes_into_the_path_safely():
    assert telemetry.trace_file_path("/x/{service}.jsonl", "gpu-probe[node1]") == "/x/gpu-probe_node1.jsonl"
    assert telemetry.trace_file_path("/x/all.jsonl", "decider") == "/x/all.jsonl"


def test_an_unwritable_file_drops_the_batch_without_raising(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    exporter = telemetry.SpanFileExporter(str(tmp_path / "spans.jsonl"))
    exporter.path = str(blocker / "spans.jsonl")  # a path under a plain file cannot be opened
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("lost") as span:
        pass
    assert exporter.export([span]) == SpanExportResult.FAILURE
    exporter.path = str(tmp_path / "spans.jsonl")
    assert exporter.export([span]) == SpanExportResult.SUCCESS


def test_a_service_given_the_setting_writes_its_spans_on_exit(tmp_path):
    """setup_tracing as every service's main calls it, in a fresh process (the provider is global)."""
    template = str(tmp_path / "{service}.jsonl")
    code = ("from relaunch.common import telemetry\n"
            "from relaunch.common.settings import CommonSettings\n"
            "s = CommonSettings()\n"
            "telemetry.setup_tracing('decider', s.otlp_endpoint, s.trace_file)\n"
            "with telemetry.tracer().start_as_current_span('work'):\n"
            "    pass\n")
    env = {**os.environ, "RELAUNCH_TRACE_FILE": template}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    (record,) = _lines(tmp_path / "decider.jsonl")
    assert record["name"] == "work" and record["service"] == "relaunch-decider"
    assert CommonSettings.model_fields["trace_file"].default == ""
