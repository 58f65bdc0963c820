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

import re

from relaunch.common.repeats import collapse

_NOT_EXCLUDED = re.compile(r"not excluded: ([^\s,;]+(?:,[^\s,;]+)*), which the job requires")
"""The actuator's note on a CONVERGED step when it kept nodes the job requires (sbatch -w):
relaunch.actuator.domain.reconciling._dropped_note."""


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


def _strip(item: Mapping[str, Any], why: str) -> dict[str, Any]:
    out = dict(item)
    if out.get("evidence"):
        out["evidence_withheld"] = why
    out["evidence"] = []
    return out


def withhold_in_advice(items: Iterable[Mapping[str, Any]], why: str) -> list[dict[str, Any]]:
    """Advice rows (with `evidence` from `resolve`) without the log lines of the anomalies they cite."""
    out = []
    for ad in items:
        ad = dict(ad)
        if why and isinstance(ad.get("evidence"), Mapping):
            ad["evidence"] = {**ad["evidence"],
                              "anomalies": [_strip(a, why) for a in ad["evidence"].get("anomalies") or []]}
        out.append(ad)
    return out


def withhold_lines(detail: dict[str, Any], why: str) -> dict[str, Any]:
    """A job's ledger view (LedgerReader.job) without the log lines its anomalies quote, when `why`
    says they may not be read (relaunch.api.auth.evidence_withheld); unchanged when `why` is "".

    Each anomaly, and each anomaly an Advice's evidence resolves to, keeps its summary, nodes and
    category (from the signature catalogue, not the log) and loses `evidence`; `evidence_withheld`
    says why, on the view and on each item that had lines. A copy: the ledger rows are not changed."""
    if not why:
        return detail
    return {**detail, "anomalies": [_strip(a, why) for a in detail.get("anomalies") or []],
            "advice": withhold_in_advice(detail.get("advice") or [], why), "evidence_withheld": why,
            # the ranks' stack frames are the job's own text too; the verdict and its reason stay
            "hang_evidence": [{**h, "ranks": [{**r, "frames": []} for r in h.get("ranks") or []]}
                              for h in detail.get("hang_evidence") or []]}


def exclusion(advice: Mapping[str, Any]) -> dict[str, Any]:
    """What an Advice really left out, from its reconcile steps: `excluded` (the nodes the restart ran
    without), `kept` (nodes the decider blamed that the actuator kept because the job requires them),
    and `exclusion_words`, the same in words ("restart without node3", "restart; node2 kept: the job
    requires it"). Until the restart converges the words say what is asked, not what was done."""
    asked = list(advice.get("exclude_nodes") or [])
    kept: list[str] = []
    for step in advice.get("reconcile") or []:
        found = _NOT_EXCLUDED.search(str(step.get("detail") or ""))
        if found:
            kept = [n for n in found.group(1).split(",") if n in asked]
    excluded = [n for n in asked if n not in kept]
    operation = str(advice.get("operation") or "")
    converged = advice.get("status") == "CONVERGED"
    words = operation
    if excluded:
        words += f" without {', '.join(excluded)}" if converged else f", asking to leave out {', '.join(excluded)}"
    if kept:
        words += (f"; {', '.join(kept)} kept: the job requires {'it' if len(kept) == 1 else 'them'} "
                  "(sbatch -w), so it was not excluded")
    return {"excluded": excluded, "kept": kept, "exclusion_words": words}
