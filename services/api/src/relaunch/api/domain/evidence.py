"""Advice evidence references, resolved into what a person reads.

The decider stores `Advice.evidence_refs` as strings (relaunch.decider.handlers):
  "anomaly:<anomaly_id>"                      the anomaly the Advice answers
  "node:<node>:<confidence>:<reason>"         one reason why attribution suspects a node
Repeated readings of one fault are said once with a count and a time span (relaunch.common.repeats).
Invariant: a reference of a shape we do not know is kept verbatim under "other", never dropped,
so a newer decider that adds a kind still shows up, only less prettily.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from relaunch.common.repeats import collapse


def resolve(refs: Iterable[str], anomalies: Mapping[str, Mapping[str, Any]]) -> dict[str, list]:
    """`anomalies` maps anomaly_id -> ledger row (with its evidence lines)."""
    found_anomalies: list[dict[str, Any]] = []
    suspects: dict[str, dict[str, Any]] = {}
    other: list[str] = []
    for ref in refs:
        kind, _, rest = str(ref).partition(":")
        if kind == "anomaly" and rest:
            row = anomalies.get(rest)
            found_anomalies.append({
                "anomaly_id": rest, "in_ledger": row is not None,
                "summary": row.get("summary", "") if row else "",
                "evidence": list(row.get("evidence") or []) if row else [],
            })
            continue
        if kind == "node":
            node, _, tail = rest.partition(":")
            confidence, _, reason = tail.partition(":")
            try:
                value = float(confidence)
            except ValueError:
                other.append(ref)
                continue
            # One ref per reason: group them so a node is listed once with all its reasons.
            entry = suspects.setdefault(node, {"node": node, "confidence": value, "reasons": []})
            entry["confidence"] = max(entry["confidence"], value)
            if reason:
                entry["reasons"].append(reason)
            continue
        other.append(ref)
    for entry in suspects.values():
        # Advice written before the decider collapsed repeated readings still reads once per fault.
        entry["reasons"] = collapse(entry["reasons"])
    return {"anomalies": found_anomalies, "suspects": list(suspects.values()), "other": other}
