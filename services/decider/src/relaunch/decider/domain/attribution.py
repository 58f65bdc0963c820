"""attribute(anomaly, job_nodes, node_events, now, node_history) -> suspect nodes with reasons. Pure.

Evidence used here: a node named by the failing log line when the signature says the fault is the
node's (action restart_excluding); gpu-probe's non-healthy readings of the job's nodes in a window
before the failure; and each node's history across jobs (a node that relaunch excluded for several
other jobs recently is suspect for everyone). Only nodes of the failed attempt can be suspects: excluding a node the
job never ran on changes nothing, and one Slurm does not know makes the update fail.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from relaunch.common.schemas import AnomalyDetected

WINDOW = dt.timedelta(minutes=15)
"""gpu-probe readings this long before the anomaly (and up to its detection) count as evidence."""
EXCLUDE_AT = 0.7
"""Suspects at or above this confidence are excluded from the next attempt."""
HISTORY_WINDOW = dt.timedelta(hours=24)
"""Exclusions of a node for other jobs this recent count as its history."""
HISTORY_JOBS = 2
"""A node excluded for at least this many other jobs within HISTORY_WINDOW is suspect for everyone."""


@dataclass(frozen=True)
class NodeEvent:
    node: str
    verdict: str
    reasons: tuple[str, ...]
    at: dt.datetime


@dataclass(frozen=True)
class Suspect:
    node: str
    confidence: float
    reasons: tuple[str, ...]

    @property
    def excluded(self) -> bool:
        return self.confidence >= EXCLUDE_AT


def attribute(anomaly: AnomalyDetected, job_nodes: list[str], events: list[NodeEvent], now: dt.datetime,
              window: dt.timedelta = WINDOW, node_history: dict[str, tuple[str, ...]] | None = None
              ) -> tuple[Suspect, ...]:
    """`node_history`: node -> the other jobs whose Advice excluded it within HISTORY_WINDOW."""
    members = set(job_nodes) or set(anomaly.nodes)
    found: dict[str, tuple[float, list[str]]] = {}

    def add(node: str, confidence: float, reason: str) -> None:
        best, reasons = found.get(node, (0.0, []))
        found[node] = (max(best, confidence), reasons + [reason])

    node_fault = anomaly.action == "restart_excluding"
    if node_fault or anomaly.fault_domain in ("hardware", "infrastructure"):
        named = [n for n in anomaly.nodes if n in members]
        # A line that names some nodes among several (a host, or both ends of a failed InfiniBand
        # transfer) is evidence; a node's own fault class on a one-node attempt is too. All nodes of
        # a multi-node job are not: excluding them all says nothing and may leave nothing to run on.
        if named and (len(named) < len(members) or (len(members) == 1 and node_fault)):
            for node in named:
                add(node, 0.8 if node_fault else 0.7,
                    f"{anomaly.category} ({anomaly.fault_domain}) in the job's log names it")
    for event in events:
        if event.node not in members or not (anomaly.detected_at - window <= event.at <= now):
            continue
        if event.verdict == "failed":
            add(event.node, 0.9, f"gpu-probe: failed at {event.at:%H:%M:%S}: {'; '.join(event.reasons)[:300]}")
        elif event.verdict == "degraded":
            add(event.node, 0.5, f"gpu-probe: degraded at {event.at:%H:%M:%S}: {'; '.join(event.reasons)[:300]}")
    for node, jobs in (node_history or {}).items():
        if node in members and len(set(jobs)) >= HISTORY_JOBS:
            shown = ", ".join(sorted(set(jobs))[:5])
            add(node, 0.75, f"excluded for {len(set(jobs))} other jobs in the last "
                            f"{HISTORY_WINDOW.total_seconds() / 3600:.0f} h ({shown})")
    return tuple(sorted((Suspect(n, c, tuple(dict.fromkeys(r))) for n, (c, r) in found.items()),
                        key=lambda s: (-s.confidence, s.node)))
