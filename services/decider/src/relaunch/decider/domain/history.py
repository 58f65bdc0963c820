"""What the ledger knows of one job when an anomaly arrives: its attempts and relaunch's restarts. Pure.

Invariants:
- an attempt is identified by Slurm's restart count (0 = the first run); the ledger keeps every one;
- a restart here is an Advice relaunch issued (whatever became of it): counting every issued Advice
  means a budget can never be exceeded, even when a reconcile outcome is still unknown;
- steps are the highest training step an attempt reached, None where nothing reported progress.
  Every rule that reads them does nothing on None: no progress report is not proof of no progress.

New kinds of history (a node's record across jobs, say) belong here as further fields with empty
defaults, so that decide() and its callers keep working while they are added.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

from relaunch.common.schemas import AnomalyDetected

FAULT_CLASSES = ("hardware", "infrastructure", "application", "resource", "scheduler", "unknown", "hang", "straggler")
"""Failure classes that have their own restart budget: the fault domains, then hangs and stragglers."""


def fault_class(anomaly: AnomalyDetected) -> str:
    """Hangs and stragglers are classes of their own (their domain is rarely known when they are
    detected); a crash is classed by its fault domain."""
    return anomaly.kind if anomaly.kind in ("hang", "straggler") else anomaly.fault_domain


@dataclass(frozen=True)
class AttemptRecord:
    index: int
    started_at: dt.datetime | None = None
    """When relaunch first saw the attempt (the observer polls, so within seconds of its start)."""
    ended_at: dt.datetime | None = None
    high_step: int | None = None
    exit_code: int | None = None
    state: str = ""


@dataclass(frozen=True)
class RestartRecord:
    attempt: int
    """The attempt that failed; the restart began attempt + 1."""
    generation: int
    fault_class: str
    at: dt.datetime


@dataclass(frozen=True)
class History:
    decided_attempts: frozenset[int] = field(default_factory=frozenset)
    last_generation: int = 0
    user_cancelled: bool = False
    attempts: tuple[AttemptRecord, ...] = ()
    restarts: tuple[RestartRecord, ...] = ()

    def attempt(self, index: int) -> AttemptRecord | None:
        return next((a for a in self.attempts if a.index == index), None)

    def restarts_by_class(self) -> Counter[str]:
        return Counter(r.fault_class for r in self.restarts)

    def high_step(self, first: int, last: int) -> int | None:
        """The highest step any attempt from `first` to `last` (inclusive) reached, None if none said."""
        steps = [a.high_step for a in self.attempts if first <= a.index <= last and a.high_step is not None]
        return max(steps, default=None)
