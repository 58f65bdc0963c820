"""Nodes across jobs: the latest gpu-probe reading, the history of non-healthy readings, and the
jobs whose Advice excluded the node. A node appears when any of the three knows it (an excluded
node may never have run a probe).

An operator's clearance (`relaunch nodes clear NODE`, migration 0009) forgets what came before it:
the newest one is `cleared`, and each reading and exclusion at or before it is marked
`forgotten: true` (kept, so the record stays inspectable, but the decider no longer counts it)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

Row = Mapping[str, Any]


def _forgotten(at: Any, cleared: Any) -> bool:
    if cleared is None or at is None:
        return False
    as_time = lambda v: v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(str(v))  # noqa: E731
    return as_time(at) <= as_time(cleared)


def assemble(health: Iterable[Row], events: Iterable[Row], exclusions: Iterable[Row],
             clearances: Iterable[Row] = ()) -> list[dict[str, Any]]:
    nodes: dict[tuple[str, str], dict[str, Any]] = {}

    def node(cluster: str, name: str) -> dict[str, Any]:
        return nodes.setdefault((cluster, name), {
            "cluster": cluster, "node": name, "verdict": "unknown", "reasons": [], "xids": [], "at": None,
            "history": [], "history_total": 0, "excluded_by": [], "cleared": None,
        })

    for row in health:
        entry = node(row["cluster"], row["node"])
        entry.update(verdict=row["verdict"], reasons=list(row.get("reasons") or []),
                     xids=list(row.get("xids") or []), at=row.get("at"))
    for row in events:
        entry = node(row["cluster"], row["node"])
        entry["history"].append({"verdict": row["verdict"], "reasons": list(row.get("reasons") or []),
                                 "xids": list(row.get("xids") or []), "at": row.get("at")})
        entry["history_total"] = max(entry["history_total"], int(row.get("total") or 0), len(entry["history"]))
    for row in exclusions:
        entry = node(row["cluster"], row["node"])
        entry["excluded_by"].append({key: row.get(key) for key in (
            "job_id", "name", "generation", "attempt", "status", "reason", "issued_at")})
    for row in clearances:
        entry = nodes.get((row["cluster"], row["node"]))
        if entry is not None and (entry["cleared"] is None or str(row["at"]) > str(entry["cleared"]["at"])):
            entry["cleared"] = {key: row.get(key) for key in ("at", "actor", "reason")}
    for entry in nodes.values():
        cleared = (entry["cleared"] or {}).get("at")
        for item in entry["history"]:
            item["forgotten"] = _forgotten(item["at"], cleared)
        for item in entry["excluded_by"]:
            item["forgotten"] = _forgotten(item["issued_at"], cleared)
        entry["history"].sort(key=lambda item: item["at"] or "", reverse=True)
        entry["excluded_by"].sort(key=lambda item: item["issued_at"] or "", reverse=True)
    return [nodes[key] for key in sorted(nodes)]
