"""The fleet at a glance, from the ledger. Pure: rows in, the dashboard's numbers out.

- per UTC day: failures (anomalies) by fault class (hang and straggler are classes of their own, a
  crash is classed by its fault domain, as the decider classes them) and by the action its signature
  asked for; restarts (restart Advice) and stops (the decider's stop and terminate decisions);
- time lost per failure: from the failure's detection to the job running again (the next attempt's
  first sighting by the observer); MTTR is their mean. A failure not followed by another attempt
  (stopped, or still recovering) has no time to recovery and is counted apart;
- the nodes most often implicated (left out by an Advice), each with the reasons, said once.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from relaunch.common.repeats import collapse

Row = Mapping[str, Any]


def _time(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def fault_class(row: Row) -> str:
    return row["kind"] if row["kind"] in ("hang", "straggler") else row["fault_domain"]


def fleet(anomalies: Iterable[Row], advice: Iterable[Row], attempts: Iterable[Row], stops: Iterable[Row],
          now: dt.datetime, days: int = 14, top_nodes: int = 10) -> dict[str, Any]:
    since = (now - dt.timedelta(days=days - 1)).date()
    anomalies, advice, stops = list(anomalies), list(advice), list(stops)
    day_keys = [(since + dt.timedelta(days=i)).isoformat() for i in range(days)]
    per_day: dict[str, dict[str, Any]] = {d: {"day": d, "by_class": Counter(), "by_action": Counter(),
                                              "restarts": 0, "stops": 0} for d in day_keys}
    for a in anomalies:
        day = _time(a["detected_at"]).date().isoformat()
        if day in per_day:
            per_day[day]["by_class"][fault_class(a)] += 1
            per_day[day]["by_action"][a["action"]] += 1
    for ad in advice:
        day = _time(ad["issued_at"]).date().isoformat()
        if day in per_day and ad["operation"] == "restart":
            per_day[day]["restarts"] += 1
    for s in stops:
        day = _time(s["at"]).date().isoformat()
        if day in per_day:
            per_day[day]["stops"] += 1
    starts = {(r["cluster"], r["job_id"], r["index"]): _time(r["first_seen"]) for r in attempts if r.get("first_seen")}
    recoveries, unrecovered = [], 0
    seen: set[tuple[str, str, int]] = set()
    for a in sorted(anomalies, key=lambda a: _time(a["detected_at"])):
        key = (a["cluster"], a["job_id"], a["attempt"])
        if key in seen:  # one failure per attempt: the first anomaly is the failure line
            continue
        seen.add(key)
        again = starts.get((a["cluster"], a["job_id"], a["attempt"] + 1))
        failed = _time(a["detected_at"])
        if again is None or again < failed:
            unrecovered += 1
            continue
        recoveries.append({"cluster": a["cluster"], "job_id": a["job_id"], "attempt": a["attempt"],
                           "class": fault_class(a), "failed_at": failed.isoformat(),
                           "running_again_at": again.isoformat(), "lost_s": round((again - failed).total_seconds(), 1)})
    lost = [r["lost_s"] for r in recoveries]
    nodes: dict[tuple[str, str], dict[str, Any]] = {}
    for ad in advice:
        refs = ad.get("evidence_refs") or []
        for node in ad.get("exclude_nodes") or []:
            entry = nodes.setdefault((ad["cluster"], node), {"cluster": ad["cluster"], "node": node, "times": 0,
                                                             "jobs": [], "_reasons": []})
            entry["times"] += 1
            if ad["job_id"] not in entry["jobs"]:
                entry["jobs"].append(ad["job_id"])
            for ref in refs:
                kind, _, rest = str(ref).partition(":")
                name, _, tail = rest.partition(":")
                if kind == "node" and name == node:
                    entry["_reasons"].append(tail.partition(":")[2])
    implicated = sorted(nodes.values(), key=lambda n: (-n["times"], n["node"]))[:top_nodes]
    for entry in implicated:
        entry["reasons"] = collapse(entry.pop("_reasons"))[:8]
    days_out = [{**d, "by_class": dict(d["by_class"]), "by_action": dict(d["by_action"])} for d in per_day.values()]
    return {"days": days_out, "recoveries": recoveries[-200:], "unrecovered": unrecovered,
            "mttr_s": round(sum(lost) / len(lost), 1) if lost else None,
            "lost_s_total": round(sum(lost), 1), "nodes": implicated,
            "failures": sum(sum(d["by_class"].values()) for d in days_out),
            "restarts": sum(d["restarts"] for d in days_out), "stops": sum(d["stops"] for d in days_out)}
