"""How long Slurm has kept refusing one reconcile step, and when to tell the operator.

A step Slurm refuses for a passing reason (the controller restarting, a job still completing) is
retried every ~2 s and says nothing above debug level. A refusal that lasts is different: the job may
be held and going nowhere, so the actuator warns once it has lasted WARN_AFTER_S, and again every
REPEAT_S while it lasts. Pure: the caller passes the time in.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

WARN_AFTER_S = 30.0
REPEAT_S = 300.0
MAX_TRACKED = 10_000
"""Steps tracked at once; the oldest is forgotten beyond this (one per live Advice in practice)."""

Key = tuple[str, str, int, str]
"""(cluster, job id, generation, step)."""

_HINTS = (
    ("the DB index is being set",
     "Slurm refuses every update of a job whose accounting record it is still creating. If slurmctld "
     "stopped right after the requeue, Slurm 22.05 keeps refusing until the job starts, and a held "
     "job never starts; stopping slurmdbd for about 10 s clears it: see 'When Slurm keeps refusing a "
     "step' in docs/operator-guide.md"),
    ("timed out",
     "slurmctld did not answer in time: is it overloaded or restarting? (scontrol ping)"),
    ("Unable to contact slurm controller",
     "slurmctld is not reachable: is it running? (scontrol ping)"),
)


@dataclass
class Refusal:
    first_at: float
    last_at: float
    count: int
    text: str
    warnings: int = 0
    warned_at: float | None = None

    @property
    def lasted_s(self) -> float:
        return self.last_at - self.first_at


class Refusals:
    """Consecutive refusals of each step, keyed by Advice and step; a success or a finish forgets them."""

    def __init__(self, warn_after_s: float = WARN_AFTER_S, repeat_s: float = REPEAT_S,
                 max_tracked: int = MAX_TRACKED) -> None:
        self.warn_after_s, self.repeat_s, self.max_tracked = warn_after_s, repeat_s, max_tracked
        self._open: OrderedDict[Key, Refusal] = OrderedDict()

    def refused(self, key: Key, text: str, now: float) -> Refusal | None:
        """Record one refusal; return the refusal when a warning is due now (at most once per REPEAT_S)."""
        r = self._open.get(key)
        if r is None:
            r = self._open[key] = Refusal(first_at=now, last_at=now, count=0, text=text)
            while len(self._open) > self.max_tracked:
                self._open.popitem(last=False)
        r.count, r.last_at, r.text = r.count + 1, now, text
        if r.lasted_s < self.warn_after_s:
            return None
        if r.warned_at is not None and now - r.warned_at < self.repeat_s:
            return None
        r.warnings, r.warned_at = r.warnings + 1, now
        return r

    def accepted(self, key: Key) -> Refusal | None:
        """The step went through: forget its refusals and return them (None if there were none)."""
        return self._open.pop(key, None)

    def forget(self, cluster: str, job_id: str, generation: int) -> None:
        """The Advice finished: forget every step of it."""
        for key in [k for k in self._open if k[:3] == (cluster, job_id, generation)]:
            del self._open[key]

    def __len__(self) -> int:
        return len(self._open)


def hint(text: str) -> str:
    """What a lasting refusal's text most likely means, for the operator ('' when not known)."""
    return next((h for marker, h in _HINTS if marker in text), "")


def describe(step: str, command: str, r: Refusal) -> str:
    """The warning text: what is refused, for how long, Slurm's words and what they likely mean."""
    detail = (f"Slurm has refused {step} ({command}) {r.count} time{'s' if r.count != 1 else ''} "
              f"over {r.lasted_s:.0f} s; still retrying every few seconds until the Advice expires. "
              f"Last refusal: {r.text}")
    h = hint(r.text)
    return f"{detail}. {h}" if h else detail
