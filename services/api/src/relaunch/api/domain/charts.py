"""What a job's progress chart draws: each attempt's progress series and the ledger's events on the
same time axis. Pure: the ledger's job detail and the progress history in, plain dicts out.

- series: one per attempt, from the detector's bounded progress history (relaunch.common.
  progress_history). A bucket belongs to the attempt the ledger says was running when the bucket's
  first report came (attempt k runs from its first_seen to attempt k+1's); each point is a bucket:
  its last time, its highest step, its mean throughput and step time, how many reports it holds;
- markers: anomalies (with their evidence lines), Advice (with each fault's evidence said once,
  relaunch.common.repeats), reconcile steps and restarts (an attempt's start), each with a `t` and
  the lines a hover shows;
- guides where they apply: a hang's silence (from the attempt's last progress to its detection: the
  deadline passed at its end) and a straggler's baseline and threshold (the numbers the detector
  put in its finding, "... below the baseline 150 ...; threshold 30%").
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

from relaunch.common.progress_history import Bucket
from relaunch.common.repeats import collapse

ATTEMPT_SLACK_S = 2.0
"""The observer sees an attempt start within a poll (about 1 s); a report this much earlier still
belongs to it, unless it came before the attempt before it failed: relaunch restarts within 1-2 s,
so the last steps before a crash fall inside this slack, and they are the failed attempt's."""
_BASELINE = re.compile(r"below the baseline (?P<baseline>[0-9.]+(?:e[+-]?\d+)?)")
_THRESHOLD = re.compile(r"threshold (?P<pct>\d+)%")


def _t(iso: Any) -> float | None:
    if iso is None:
        return None
    if isinstance(iso, dt.datetime):
        return iso.timestamp()
    return dt.datetime.fromisoformat(str(iso)).timestamp()


def _attempt_of(t: float, starts: Sequence[tuple[int, float]]) -> int | None:
    """The attempt whose reports had begun at `t` (starts: `_starts`, slack included)."""
    found = None
    for index, start in starts:
        if t >= start:
            found = index
    return found if found is not None else (starts[0][0] if starts else None)


def _starts(attempts: Sequence[Mapping[str, Any]], anomalies: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """When each attempt's reports begin: its first_seen less the slack, but never before the attempt
    before it failed (its first anomaly other than a straggler: a slow run goes on)."""
    failed: dict[int, float] = {}
    for an in anomalies:
        t = _t(an.get("detected_at"))
        if an.get("kind") != "straggler" and t is not None:
            failed[an["attempt"]] = min(t, failed.get(an["attempt"], t))
    starts = []
    for a in attempts:
        seen = _t(a.get("first_seen"))
        if seen is None:
            continue
        begin = seen - ATTEMPT_SLACK_S
        before = failed.get(a["index"] - 1)
        if before is not None:
            begin = min(seen, max(begin, before + 0.001))  # a report at the failure itself is the failed attempt's
        starts.append((a["index"], begin))
    return starts


def progress_chart(detail: Mapping[str, Any], buckets: Sequence[Bucket], width: int) -> dict[str, Any]:
    attempts = sorted(detail.get("attempts") or [], key=lambda a: a["index"])
    starts = _starts(attempts, detail.get("anomalies") or [])
    series: dict[int, list[dict]] = {a["index"]: [] for a in attempts}
    for b in buckets:
        index = _attempt_of(b.first_at, starts)
        if index is None:
            index = 0
        series.setdefault(index, []).append({
            "t": round(b.last_at, 3), "t_first": round(b.first_at, 3), "step": b.step_max, "step_min": b.step_min,
            "throughput": None if b.throughput is None else round(b.throughput, 4),
            "step_time_s": None if b.step_time_s is None else round(b.step_time_s, 4), "reports": b.n})
    markers: list[dict[str, Any]] = []
    guides: list[dict[str, Any]] = []
    for a in attempts[1:]:
        if a.get("first_seen"):
            markers.append({"t": _t(a["first_seen"]), "kind": "restart", "attempt": a["index"],
                            "label": f"attempt {a['index']} started on {', '.join(a.get('nodes') or []) or '-'}",
                            "evidence": []})
    for an in detail.get("anomalies") or []:
        t = _t(an["detected_at"])
        lines = [line.get("text", "") for line in an.get("evidence") or []][:6]
        markers.append({"t": t, "kind": "anomaly", "subkind": an["kind"], "attempt": an["attempt"],
                        "label": f"{an['kind']}: {an['category']} ({an['fault_domain']}, {an['action']})",
                        "evidence": [an.get("summary", "")] + collapse(lines)})
        if an["kind"] == "hang":
            before = [p["t"] for p in series.get(an["attempt"], []) if p["t"] <= t]
            if before:
                guides.append({"kind": "hang_silence", "attempt": an["attempt"], "from": max(before), "to": t,
                               "label": f"no progress from here until the hang deadline passed: {an['summary']}"})
        if an["kind"] == "straggler" and (m := _BASELINE.search(an.get("summary", ""))) \
                and "throughput" in an.get("summary", "").split(" rate", 1)[0]:
            baseline = float(m["baseline"])
            pct = _THRESHOLD.search(an["summary"])
            threshold = baseline * (1 - int(pct["pct"]) / 100) if pct else None
            guides.append({"kind": "straggler_baseline", "attempt": an["attempt"], "baseline": baseline,
                           "threshold": threshold, "label": an["summary"]})
    for ad in detail.get("advice") or []:
        resolved = ad.get("evidence") or {}
        why = [f"{s['node']} ({s['confidence']}): {r}" for s in resolved.get("suspects", []) for r in s["reasons"]]
        excluding = f" without {', '.join(ad['exclude_nodes'])}" if ad.get("exclude_nodes") else ""
        markers.append({"t": _t(ad["issued_at"]), "kind": "advice", "attempt": ad["attempt"],
                        "label": f"Advice generation {ad['generation']}: {ad['operation']}{excluding} → {ad['status']}",
                        "evidence": why or [ad.get("reason", "")]})
        for step in ad.get("reconcile") or []:
            markers.append({"t": _t(step["at"]), "kind": "reconcile", "attempt": ad["attempt"],
                            "label": f"generation {step['generation']}: {step['status']}"
                                     f"{' — ' + step['step'] if step.get('step') else ''}",
                            "evidence": [step.get("reason", "")] + ([step["detail"]] if step.get("detail") else [])})
    markers.sort(key=lambda m: (m["t"] or 0))
    out_attempts = []
    for index, points in sorted(series.items()):
        record = next((a for a in attempts if a["index"] == index), {})
        out_attempts.append({"index": index, "state": record.get("state"), "nodes": record.get("nodes") or [],
                             "first_seen": _t(record.get("first_seen")), "points": points})
    return {"resolution_s": width, "attempts": out_attempts, "markers": markers, "guides": guides}
