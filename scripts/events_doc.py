#!/usr/bin/env python3
"""Generate docs/events.md (the events reference) from relaunch.common.schemas and subjects.

    .venv/bin/python scripts/events_doc.py            # rewrite docs/events.md
    .venv/bin/python scripts/events_doc.py --check    # exit 1 and print the diff when it is stale

Channels and their producers come from the table below (`CHANNELS`, one row per subject function of
relaunch.common.subjects), streams and durable consumers from relaunch.common.subjects; fields, types,
limits and descriptions come from the pydantic models. A unit
test (tests/unit/test_docs_events.py) fails when the checked-in file differs from what this makes.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic.json_schema import models_json_schema

from relaunch.common import schemas, subjects

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "docs" / "events.md"


def _asyncapi():
    spec = importlib.util.spec_from_file_location("relaunch_asyncapi_script", REPO / "scripts" / "asyncapi.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Channel:
    id: str
    subject: object
    """The function in relaunch.common.subjects that spells the address."""
    message: type[schemas.Message]
    producers: str
    reply: type[schemas.Message] | None = None


CHANNELS = (
    Channel("signalLog", subjects.signal_log, schemas.LogBatch,
            "the detector's log follower, or any shipper (a Vector or Fluent Bit NATS sink)"),
    Channel("signalProgress", subjects.signal_progress, schemas.ProgressReported,
            "training code through relaunch.client.report_progress, or a log parser"),
    Channel("signalJob", subjects.signal_job, schemas.JobObserved, "the actuator's scheduler observer"),
    Channel("signalNode", subjects.signal_node, schemas.NodeHealth, "gpu-probe, one per node"),
    Channel("eventAnomaly", subjects.event_anomaly, schemas.AnomalyDetected, "the detector"),
    Channel("advice", subjects.advice, schemas.Advice, "the decider, through its transactional outbox"),
    Channel("eventReconcile", subjects.event_reconcile, schemas.ReconcileStatus, "the actuator"),
    Channel("eventHangEvidence", subjects.event_hang_evidence, schemas.HangEvidence,
            "the actuator, on a hang anomaly (docs/architecture.md, \"Hang evidence\")"),
    Channel("eventCheckpoint", subjects.event_checkpoint, schemas.CheckpointFact,
            "the detector, from save lines, relaunch.client reports and its progress watch (docs/goodput.md)"),
    Channel("eventAudit", subjects.event_audit, schemas.AuditEntry, "every service, and the API for overrides"),
    Channel("dlq", subjects.dlq, schemas.DeadLetter, "every service, for a message it could not accept"),
    Channel("controlInject", subjects.control_inject, schemas.FaultInjection,
            "`relaunch inject` (a plain NATS request; the probe's fake backend answers)", reply=schemas.InjectionAck),
)


def subject_functions() -> dict[str, object]:
    """Every public function of relaunch.common.subjects that spells a subject (what CHANNELS must cover)."""
    return {name: fn for name, fn in inspect.getmembers(subjects, inspect.isfunction)
            if fn.__module__ == subjects.__name__ and not name.startswith("_")}


def _params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _address(channel: Channel) -> str:
    return channel.subject(*(f"{{{p}}}" for p in _params(channel.subject)))


def _duration(seconds: float) -> str:
    return f"{seconds / 86400:g} days" if seconds >= 86400 else f"{seconds / 3600:g} hours"


def _summary(model: type) -> str:
    return inspect.cleandoc(model.__doc__ or model.__name__).split("\n\n")[0].replace("\n", " ")


def _durables(address: str) -> list[subjects.ConsumerSpec]:
    specs = [v for v in vars(subjects).values() if isinstance(v, subjects.ConsumerSpec)]
    return sorted((s for s in specs if _asyncapi()._matches(s.filter_subject, address)), key=lambda s: s.durable)


def _anchor(name: str) -> str:
    return name.lower()


def _type(prop: dict) -> str:
    """A field's JSON Schema as a short human type."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "const" in prop:
        return f"`\"{prop['const']}\"`"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "anyOf" in prop:
        parts = [_type(p) for p in prop["anyOf"]]
        return " \\| ".join("null" if p == "null" else p for p in parts)
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object":
        values = prop.get("additionalProperties")
        return f"object of {_type(values)}" if isinstance(values, dict) else "object"
    if prop.get("format") == "date-time":
        return "date-time (RFC 3339)"
    return kind


def _limits(prop: dict) -> str:
    parts = []
    for src in [prop, *prop.get("anyOf", [])]:
        for key, text in (("minimum", ">= {}"), ("maximum", "<= {}"), ("minLength", "at least {} chars"),
                          ("maxLength", "at most {} chars"), ("pattern", "matches `{}`")):
            if key in src:
                parts.append(text.format(src[key]))
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _fields(schema: dict, known: dict[str, str]) -> list[str]:
    required = set(schema.get("required", []))
    rows = ["| field | type | required | default | limits | meaning |", "|---|---|---|---|---|---|"]
    for name, prop in schema["properties"].items():
        default = "" if name in required or "default" not in prop else f"`{prop['default']!r}`".replace("'", '"')
        if default == "`None`":
            default = "`null`"
        rows.append(f"| `{name}` | {_type(prop)} | {'yes' if name in required else 'no'} | {default} | "
                    f"{_cell(_limits(prop))} | {_cell(prop.get('description') or known.get(name, ''))} |")
    return rows


def render() -> str:
    gen = _asyncapi()
    _, top = models_json_schema([(m, "serialization") for m in schemas.ALL_MODELS],
                                ref_template="#/$defs/{model}")
    defs = top["$defs"]
    out = [
        "<!-- Generated by scripts/events_doc.py from relaunch.common.schemas and relaunch.common.subjects.",
        "     Do not edit by hand: change the code, then run `.venv/bin/python scripts/events_doc.py`. -->",
        "",
        "# Events reference",
        "",
        "Every message relaunch puts on NATS: where it travels, who publishes and who consumes it, and",
        "every field of its body. Bodies are JSON, one versioned model each (the `schema` field); within",
        "a version changes are additive only, and every model refuses fields it does not know. Each",
        "message carries W3C trace context (`traceparent`) in its NATS headers, and a deterministic",
        "`Nats-Msg-Id` where a retry could duplicate it. The machine-readable form of the same contract",
        "is [asyncapi.yaml](asyncapi.yaml); a consumer of your own: [custom-consumer.md](custom-consumer.md).",
        "",
        "## Subjects",
        "",
        "| subject | message | published by | stream | durable consumers |",
        "|---|---|---|---|---|",
    ]
    for channel in CHANNELS:
        address = _address(channel)
        streams = [s.name for s in subjects.STREAMS if any(gen._matches(f, address) for f in s.subjects)]
        durables = ", ".join(f"`{d.durable}`" for d in _durables(address)) or "-"
        name = channel.message.__name__
        reply = f" (reply: [{channel.reply.__name__}](#{_anchor(channel.reply.__name__)}))" if channel.reply else ""
        out.append(f"| `{address}` | [{name}](#{_anchor(name)}){reply} | {_cell(channel.producers)} | "
                   f"{streams[0] if streams else 'none (request/reply)'} | {durables} |")
    out += ["", "## Streams", "", "| stream | subjects | kept | duplicate window | per subject |",
            "|---|---|---|---|---|"]
    for stream in subjects.STREAMS:
        per = str(stream.max_msgs_per_subject) if stream.max_msgs_per_subject > 0 else "no limit"
        out.append(f"| {stream.name} | {', '.join(f'`{s}`' for s in stream.subjects)} | "
                   f"{_duration(stream.max_age_s)} | {stream.duplicate_window_s:g} s | {per} |")
    out += ["", "## Durable consumers", "",
            "| durable | stream | filter | ack wait | max deliveries |", "|---|---|---|---|---|"]
    specs = sorted((v for v in vars(subjects).values() if isinstance(v, subjects.ConsumerSpec)),
                   key=lambda s: s.durable)
    for spec in specs:
        deliveries = "unbounded" if spec.max_deliver < 0 else str(spec.max_deliver)
        out.append(f"| `{spec.durable}` | {spec.stream.name} | `{spec.filter_subject}` | {spec.ack_wait_s:g} s | "
                   f"{deliveries} |")
    out += ["", "## Messages", ""]
    top_level = {m.__name__ for m in schemas.ALL_MODELS}
    for name in [m.__name__ for m in schemas.ALL_MODELS]:
        schema = defs[name]
        model = getattr(schemas, name)
        out += [f"### {name}", "", f"`{model.model_fields['schema_'].default}`. {_cell(_summary(model))}", ""]
        out += _fields(schema, gen.PARAMETERS)
        out.append("")
    nested = sorted(set(defs) - top_level)
    if nested:
        out += ["## Nested types", ""]
        for name in nested:
            schema = defs[name]
            summary = _cell(schema.get("description", "")) or f"Part of a message ({name})."
            out += [f"### {name}", "", summary, ""]
            out += _fields(schema, gen.PARAMETERS)
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    return _asyncapi().write_or_check(render(), OUTPUT, "scripts/events_doc.py", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
