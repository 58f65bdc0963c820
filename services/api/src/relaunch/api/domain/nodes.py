"""Nodes across jobs: the latest gpu-probe reading, the history of non-healthy readings, and the
jobs whose Advice excluded the node. A node appears when any of the three knows it (an excluded
node may never have run a probe)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Row = Mapping[str, Any]


def assemble(health: Iterable[Row], events: Iterable[Row], exclusions: Iterable[Row]) -> list[dict[str, Any]]:
    nodes: dict[tuple[str, str], dict[str, Any]] = {}

    def node(cluster: str, name: str) -> dict[str, Any]:
        return nodes.setdefault((cluster, name), {
            "cluster": cluster, "node": name, "verdict": "unknown", "reasons": [], "xids": [], "at": None,
            "history": [], "history_total": 0, "excluded_by": [],
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
    for entry in nodes.values():
        entry["history"].sort(key=lambda item: item["at"] or "", reverse=True)
        entry["excluded_by"].sort(key=lambda item: item["issued_at"] or "", reverse=True)
    return [nodes[key] for key in sorted(nodes)]
