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

from relaunch.common.goodput import Save
from relaunch.common.schemas import AnomalyDetected



def fault_class(anomaly: AnomalyDetected) -> str:
    """Hangs and stragglers are classes of their own (their domain is rarely known when they are
    detected); a crash is classed by its fault domain."""
    if anomaly.kind == "divergence":
        return "unknown"  # divergence=restart: counted with the unknown class (docs/policy.md, "Divergence")
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
    nodes: tuple[str, ...] = ()
    """The nodes the attempt ran on, as the observer saw them (empty: not known)."""


@dataclass(frozen=True)
class RestartRecord:
    attempt: int
    """The attempt that failed; the restart began attempt + 1."""
    generation: int
    fault_class: str
    at: dt.datetime
    status: str = "PENDING"
    """PENDING (open), CONVERGED or ABANDONED: what the actuator reported of the Advice."""
    expires_at: dt.datetime | None = None
    exclude_nodes: tuple[str, ...] = ()

    def open(self, now: dt.datetime) -> bool:
        """Not carried out yet, not given up, not expired: a further incident on its attempt joins it."""
        return self.status == "PENDING" and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True)
class History:
    decided_attempts: frozenset[int] = field(default_factory=frozenset)
    last_generation: int = 0
    user_cancelled: bool = False
    attempts: tuple[AttemptRecord, ...] = ()
    restarts: tuple[RestartRecord, ...] = ()
    partition: str = ""
    partition_nodes: int | None = None
    """Usable nodes in the job's partition, as the observer last saw them (None: not known)."""
    suspects: tuple[tuple[int, str, float, tuple[str, ...]], ...] = ()
    """(attempt, node, confidence, reasons): what attribution said of each attempt's nodes."""
    launch_refused: frozenset[int] = field(default_factory=frozenset)
    """Attempts Slurm killed at launch, before the job's script ran (its credential revoked): the
    actuator requeued each under the Advice that started it and audited it ("launch refused"). They
    are not attempts of the job's own and spend nothing."""
    saves: tuple[Save, ...] = ()
    """The checkpoints the job is known to have saved (relaunch.common.goodput.completed_saves of the
    ledger's checkpoint facts), oldest first."""

    def attempt(self, index: int) -> AttemptRecord | None:
        return next((a for a in self.attempts if a.index == index), None)

    def restarts_by_class(self) -> Counter[str]:
        return Counter(r.fault_class for r in self.restarts)

    def high_step(self, first: int, last: int) -> int | None:
        """The highest step any attempt from `first` to `last` (inclusive) reached, None if none said."""
        steps = [a.high_step for a in self.attempts if first <= a.index <= last and a.high_step is not None]
        return max(steps, default=None)

    def excluded_nodes(self) -> frozenset[str]:
        """Every node an Advice of this job left out (Slurm's ExcNodeList only grows: they stay out)."""
        return frozenset(n for r in self.restarts for n in r.exclude_nodes)

    def refused_launches(self, ran: frozenset[int] = frozenset()) -> frozenset[int]:
        """The refused launches that spend nothing: launch_refused less every attempt the ledger saw run
        (it reported a training step). The actuator says "refused" only on Slurm's own evidence (the
        attempt's batch step never ran); this keeps a wrong word from ever buying an attempt that ran.
        `ran`: attempts known to have run besides (the anomaly being decided came from one's own log)."""
        return frozenset(a for a in self.launch_refused - ran
                         if (record := self.attempt(a)) is None or record.high_step is None)

    def attempts_used(self, attempt: int, ran: frozenset[int] = frozenset()) -> int:
        """Attempts of the job's own up to `attempt` (Slurm's restart count), the first included:
        refused launches (refused_launches) do not count, every other attempt Slurm counted does."""
        return attempt + 1 - sum(1 for a in self.refused_launches(ran) if a <= attempt)

    def launch_verdict_pending(self, attempt: int, now: dt.datetime) -> RestartRecord | None:
        """The restart Advice that began `attempt`, while it is still open and has not said whether
        Slurm refused this attempt's launch (the actuator verifies a successor until it is past its
        launch), else None."""
        if attempt < 1 or attempt in self.launch_refused:
            return None
        earlier = [r for r in self.restarts if r.attempt < attempt]
        last = max(earlier, key=lambda r: r.generation, default=None)
        return last if last is not None and last.open(now) else None

    def restart_before(self, attempt: int) -> RestartRecord | None:
        """The newest restart Advice issued for an attempt before `attempt`."""
        return max((r for r in self.restarts if r.attempt < attempt), key=lambda r: r.generation, default=None)

    def open_restart(self, attempt: int, now: dt.datetime) -> RestartRecord | None:
        return next((r for r in self.restarts if r.attempt == attempt and r.open(now)), None)

    def failures_without_checkpoint(self, attempt: int, ran: frozenset[int] = frozenset()) -> int:
        """How many attempts in a row, `attempt` and those before it, saved no checkpoint (refused launches
        are skipped: they never ran)."""
        saved = {s.attempt for s in self.saves}
        refused = self.refused_launches(ran)
        count = 0
        for index in range(attempt, -1, -1):
            if index in saved:
                break
            if index not in refused:
                count += 1
        return count

    def last_save(self, attempt: int) -> Save | None:
        """The newest checkpoint saved by `attempt` or one before it: where its successor should resume."""
        found = [s for s in self.saves if s.attempt <= attempt]
        return max(found, key=lambda s: (s.at, s.step)) if found else None

    def implicated(self, attempt: int) -> dict[str, tuple[float, tuple[str, ...]]]:
        """node -> (confidence, reasons) of the suspects attribution named for `attempt`."""
        return {node: (c, reasons) for a, node, c, reasons in self.suspects if a == attempt}
