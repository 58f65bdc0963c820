"""What failures cost, from the ledger's rows: one job's figures (its page, `relaunch jobs show`) and the
fleet's (the fleet view, the Prometheus gauges). Pure: rows in, plain values out; the formulas are
relaunch.common.goodput's (docs/goodput.md).

A job's figures add to goodput's: for each failure the checkpoint step its restart Advice expected the
successor to resume from (the decision's audit entry, `resume_step`) and whether it did
(`resumed_as_expected`: the successor's first step is at or past that checkpoint; one below it means an
older checkpoint, or none, was loaded; None: not known yet).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from relaunch.common import goodput
from relaunch.common.job_states import FINAL_STATES

Row = Mapping[str, Any]


def _time(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def fault_class(row: Row) -> str:
    return row["kind"] if row["kind"] in ("hang", "straggler") else row["fault_domain"]


def _inputs(attempts: Iterable[Row], anomalies: Iterable[Row], facts: Iterable[Row]):
    attempt_values = [goodput.Attempt(int(a["index"]), running_at=_time(a.get("running_at")),
                                      ended_at=_time(a.get("ended_at")), high_step=a.get("high_step"),
                                      first_seen=_time(a.get("first_seen")), nodes=len(a.get("nodes") or []))
                      for a in attempts]
    failures = [goodput.Failure(int(a["attempt"]), _time(a["detected_at"]), fault_class(a), a.get("last_step"))
                for a in anomalies if a["kind"] != "straggler"]
    fact_values = [goodput.Fact(int(f["attempt"]), f["kind"], f.get("step"), _time(f["at"])) for f in facts]
    return attempt_values, failures, fact_values


def job_ended_at(job: Row, attempts: Iterable[Row]) -> dt.datetime | None:
    """When the job ended for good: its last attempt's end, once the job is in a final state and relaunch
    is not bringing it back (None: it still runs, waits or recovers)."""
    if job.get("state") not in FINAL_STATES or job.get("verdict") == "recovering":
        return None
    ends = [_time(a.get("ended_at")) for a in attempts if a.get("ended_at")]
    return max(ends, default=None) or _time(job.get("updated_at"))


def expected_resume(audit: Iterable[Row]) -> dict[int, int]:
    """attempt -> the checkpoint step its restart decision expected the successor to resume from."""
    out: dict[int, int] = {}
    for entry in audit:
        if entry.get("service") != "decider" or entry.get("action") != "restart":
            continue
        try:
            detail = json.loads(entry.get("detail") or "{}")
        except ValueError:
            continue
        if isinstance(detail, dict) and isinstance(detail.get("resume_step"), int) and "attempt" in detail:
            out[int(detail["attempt"])] = detail["resume_step"]
    return out


def job_view(job: Row, attempts: list[Row], anomalies: list[Row], facts: list[Row], audit: list[Row],
             now: dt.datetime) -> dict[str, Any]:
    """The job's `goodput`: ETTR, lost time by part per failure and in all, the checkpoints seen."""
    attempt_values, failures, fact_values = _inputs(attempts, anomalies, facts)
    figures = goodput.goodput(attempt_values, failures, fact_values, now, job_ended_at(job, attempts))
    out = figures.as_dict()
    expected = expected_resume(audit)
    firsts = {f.attempt: f.step for f in fact_values if f.kind == "first_step"}
    for item in out["failures"]:
        want = expected.get(item["attempt"])
        item["expected_resume_step"] = want
        first = firsts.get(item["attempt"] + 1)
        item["resumed_as_expected"] = None if want is None or first is None else first >= want
    return out


def fleet_view(jobs: Iterable[tuple[Row, list[Row], list[Row], list[Row]]], now: dt.datetime,
               since: dt.datetime) -> dict[str, Any]:
    """The fleet's figures over the jobs given (job row, its attempts, anomalies, facts): ETTR (their
    productive time over their wall time), time lost by part and by fault class, MTTR (detection +
    recovery + start-up, per failure that has all three), failures per 1,000 node-hours, and per UTC day
    of the failure the same lost time by part. Failures before `since` are left out of the lost time."""
    wall = productive = 0.0
    node_hours = 0.0
    by_part: dict[str, float] = dict.fromkeys(goodput.PARTS, 0.0)
    by_class: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(goodput.PARTS, 0.0))
    by_day: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(goodput.PARTS, 0.0))
    repairs: list[float] = []
    failures = 0
    for job, attempts, anomalies, facts in jobs:
        attempt_values, failure_values, fact_values = _inputs(attempts, anomalies, facts)
        end = job_ended_at(job, attempts)
        figures = goodput.goodput(attempt_values, failure_values, fact_values, now, end)
        if figures.wall_s and figures.productive_s is not None:
            wall += figures.wall_s
            productive += figures.productive_s
        for a in attempt_values:
            start = a.running_at
            if start is None:
                continue
            stop = a.ended_at or end or now
            node_hours += max(a.nodes, 1) * max((stop - max(start, since)).total_seconds(), 0.0) / 3600
        detected = {f.attempt: f.detected_at for f in failure_values}
        for lost in figures.failures:
            at = detected.get(lost.attempt)
            if at is None or at < since:
                continue
            failures += 1
            day = at.date().isoformat()
            for part, value in lost.parts.items():
                if value is not None:
                    by_part[part] += value
                    by_class[lost.fault_class][part] += value
                    by_day[day][part] += value
            repair = [lost.parts.get(p) for p in ("detection", "recovery", "startup")]
            if all(v is not None for v in repair):
                repairs.append(sum(repair))
    return {
        "ettr": round(productive / wall, 4) if wall else None,
        "wall_s": round(wall, 3), "productive_s": round(productive, 3),
        "lost_by_part_s": {k: round(v, 3) for k, v in by_part.items()},
        "lost_by_class_s": {c: {k: round(v, 3) for k, v in parts.items()} for c, parts in sorted(by_class.items())},
        "lost_by_day_s": {d: {k: round(v, 3) for k, v in parts.items()} for d, parts in sorted(by_day.items())},
        "mttr_s": round(sum(repairs) / len(repairs), 3) if repairs else None,
        "failures": failures, "node_hours": round(node_hours, 3),
        "failures_per_1000_node_hours": round(failures * 1000 / node_hours, 3) if node_hours else None,
    }
