"""docs/asyncapi.yaml is what scripts/asyncapi.py makes of the code today: a contract change
(a schema field, a subject, a stream, a durable consumer) must show up as a diff of that file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

from relaunch.common import schemas, subjects

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("relaunch_asyncapi_script", REPO / "scripts" / "asyncapi.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_document_is_up_to_date():
    generated = _generator().render()
    checked_in = (REPO / "docs" / "asyncapi.yaml").read_text()
    assert checked_in == generated, (
        "docs/asyncapi.yaml is stale: the message contract changed. Run `.venv/bin/python scripts/asyncapi.py`, "
        "review the diff and commit it (and say so in the issue's note if it is not additive).")


def test_every_subject_and_every_message_model_is_described():
    gen = _generator()
    described = {channel.subject.__name__ for channel in gen.CHANNELS}
    assert described == set(gen.subject_functions()), "a subject function in relaunch.common.subjects has no channel"
    doc = yaml.safe_load(gen.render())
    names = {m.__name__ for m in schemas.ALL_MODELS}
    assert names <= set(doc["components"]["schemas"])
    messages = set(doc["components"]["messages"])
    assert messages == names, "every top-level model must travel on a channel"


def test_channels_name_their_stream_and_durable_consumers_from_the_code():
    doc = yaml.safe_load(_generator().render())
    advice = doc["channels"]["advice"]
    assert advice["address"] == subjects.advice("{cluster}", "{job_id}")
    assert advice["x-relaunch-stream"] == subjects.ADVICE.name
    consumer = doc["operations"]["receive_actuator_advice"]["x-relaunch-consumer"]
    assert consumer == {"durable": "actuator-advice", "stream": "ADVICE", "filter_subject": subjects.ALL_ADVICE,
                        "ack_wait_s": subjects.ACTUATOR_ADVICE.ack_wait_s, "max_deliver": -1}
    assert "x-relaunch-stream" not in doc["channels"]["controlInject"]  # request/reply, never stored
    payload = doc["components"]["schemas"]["Advice"]
    assert payload["properties"]["schema"]["const"] == "relaunch.advice/v1"
    assert payload["additionalProperties"] is False
