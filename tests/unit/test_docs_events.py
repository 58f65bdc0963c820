"""docs/events.md is what scripts/events_doc.py makes of the message models today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from relaunch.common import schemas, subjects

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("relaunch_events_doc_script", REPO / "scripts" / "events_doc.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_events_reference_is_up_to_date():
    assert (REPO / "docs" / "events.md").read_text() == _generator().render(), (
        "docs/events.md is stale: run `.venv/bin/python scripts/events_doc.py` and commit the diff")


def test_every_model_field_subject_and_consumer_is_in_the_reference():
    text = _generator().render()
    for model in schemas.ALL_MODELS:
        assert f"### {model.__name__}\n" in text
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in text, f"{model.__name__}.{name}"
    assert f"`{subjects.advice('{cluster}', '{job_id}')}`" in text
    for spec in (subjects.ACTUATOR_ADVICE, subjects.DETECTOR_LOGS, subjects.DECIDER_ANOMALIES):
        assert f"| `{spec.durable}` | {spec.stream.name} |" in text


def test_every_subject_function_has_a_row():
    gen = _generator()
    described = {channel.subject.__name__ for channel in gen.CHANNELS}
    assert described == set(gen.subject_functions()), "a subject function in relaunch.common.subjects has no row"
