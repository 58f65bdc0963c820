"""Which anomalies the actuator reads a job's ranks for, and the decider waits for evidence on (one rule
for both; docs/architecture.md, "Hang evidence"). Pure."""

from __future__ import annotations

from relaunch.common.schemas import AnomalyDetected

COLLECTIVE_TIMEOUT_CATEGORIES = frozenset({"nccl_timeout_hang"})
"""Crash signatures printed by a collective's watchdog while the ranks may still run."""


def wants_evidence(anomaly: AnomalyDetected) -> bool:
    """A hang found in the job's progress or log, or a collective timeout line. Not a lost node (its
    node is already named, and it cannot be stepped into) nor anything the scheduler reported (ended)."""
    if anomaly.source not in ("progress", "log"):
        return False
    return anomaly.kind == "hang" or anomaly.category in COLLECTIVE_TIMEOUT_CATEGORIES
