"""docs/asyncapi.yaml is what scripts/asyncapi.py (FastStream's generator over relaunch's routers) makes
of the code today: a contract change (a schema field, a subject, a stream, a declared consumer or
publisher) must show up as a diff of that file; and the document is complete."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import yaml

from relaunch.common import consumers, schemas, subjects

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"relaunch_{name}_script", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _document() -> dict:
    return yaml.safe_load(_load("asyncapi").render())


def test_the_checked_in_document_is_up_to_date():
    generated = _load("asyncapi").render()
    checked_in = (REPO / "docs" / "asyncapi.yaml").read_text()
    assert checked_in == generated, (
        "docs/asyncapi.yaml is stale: the message contract changed. Run `.venv/bin/python scripts/asyncapi.py`, "
        "review the diff and commit it (and say so in the issue's note if it is not additive).")


def test_every_declared_consumer_appears_with_relaunchs_facts():
    operations = _document()["operations"]
    for consumer in consumers.ALL:
        operation = operations[f"{consumer.spec.durable}:{consumer.model.__name__}"]
        assert operation["action"] == "receive"
        facts = operation["x-relaunch-consumer"]
        assert facts["durable"] == consumer.spec.durable and facts["stream"] == consumer.spec.stream.name
        assert (facts["ack_wait_s"], facts["max_deliver"]) == (consumer.spec.ack_wait_s, consumer.spec.max_deliver)
        assert facts["engine"] == consumer.engine
    for responder in consumers.RESPONDERS:
        operation = operations[f"{responder.name}:{responder.request.__name__}"]
        assert operation["x-relaunch-responder"]["reply"] == responder.reply.__name__
        assert "reply" in operation
    for reader in consumers.READERS:
        assert operations[f"{reader.name}:{reader.stream.name}"]["x-relaunch-reader"]["ordered_consumer"]


def test_every_declared_publisher_appears():
    doc = _document()
    sends = {op_id for op_id, op in doc["operations"].items() if op["action"] == "send"}
    declared = {pub.specification.name for router in _load("asyncapi").routers() for pub in router.publishers}
    assert declared and declared <= sends


def test_every_subject_has_a_channel_and_every_model_a_schema():
    doc = _document()
    addresses = {c["address"] for c in doc["channels"].values()}
    for name, fn in inspect.getmembers(subjects, inspect.isfunction):
        if fn.__module__ == subjects.__name__ and not name.startswith("_"):
            address = fn(*(f"{{{p}}}" for p in inspect.signature(fn).parameters))
            assert address in addresses, f"subjects.{name} has no channel: declare its publisher or consumer"
    assert {m.__name__ for m in schemas.ALL_MODELS} <= set(doc["components"]["schemas"])


def test_channels_name_their_stream_and_the_inject_request_is_never_stored():
    doc = _document()
    advice = doc["channels"]["advice"]
    assert advice["address"] == subjects.advice("{cluster}", "{job_id}")
    assert advice["x-relaunch-stream"] == subjects.ADVICE.name
    consumer = doc["operations"]["actuator-advice:Advice"]["x-relaunch-consumer"]
    assert consumer["filter_subject"] == subjects.ALL_ADVICE and consumer["max_deliver"] == -1
    assert "x-relaunch-stream" not in doc["channels"]["probe-inject:FaultInjection"]  # request/reply
    payload = doc["components"]["schemas"]["Advice"]
    assert payload["properties"]["schema"]["const"] == "relaunch.advice/v1"
    assert payload["additionalProperties"] is False
