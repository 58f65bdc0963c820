"""What failures cost a training run, from the ledger's facts (docs/goodput.md has every formula). Pure:
facts in, figures out; the time of "now" is passed in.

One failure of attempt k, followed by attempt k+1, in time order:
    last checkpoint saved (step c)  .. attempt k's last progress (step f)  .. the anomaly detected
    .. attempt k+1 RUNNING .. its first step (it resumed from step r) .. back at step f
and its lost time, by part:
    recomputation  (f - r) x k's own seconds per step: the work done since the checkpoint, done again
    detection      anomaly detected - k's last progress (a silent hang's whole silence)
    recovery       k+1 RUNNING - anomaly detected (relaunch's decision, Slurm's requeue and queue wait)
    start-up       k+1's first step - k+1 RUNNING (launch, imports, data, checkpoint load)
    warm-up        (k+1 back at f - k+1's first step) - (f - r) x k's seconds per step: how much slower
                   than k's pace the successor got back to the failed step (0 when it was not slower)
A part that a missing fact leaves unknown is None and is left out of every sum (said, never guessed).
The job's effective training time ratio (ETTR): productive step time / wall time since the first start,
where productive step time is each attempt's time from its first step to its last progress, less the
recomputation and warm-up of the failures.

Invariants: no part is negative (clock skew between hosts is clamped to 0); a fact of an attempt never
counts for another; the same facts always give the same figures (the order they come in does not matter).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PARTS = ("recomputation", "detection", "recovery", "startup", "warmup")
"""The parts of a failure's lost time, in the order they happen."""
_LATER = ("last_progress", "saved", "save_started", "caught_up")
"""Facts whose step, later in the attempt than a save's start, shows the save was written."""
FACT_KINDS = ("save_started", "saved", "first_step", "last_progress", "caught_up", "loaded")


@dataclass(frozen=True)
class Fact:
    """One row of the ledger's checkpoint_facts (schemas.CheckpointFact)."""
    attempt: int
    kind: str
    step: int | None
    at: dt.datetime


@dataclass(frozen=True)
class Attempt:
    index: int
    running_at: dt.datetime | None = None
    """First recorded RUNNING (None: not known)."""
    ended_at: dt.datetime | None = None
    high_step: int | None = None
    first_seen: dt.datetime | None = None
    nodes: int = 0


@dataclass(frozen=True)
class Failure:
    """An attempt's first anomaly (stragglers are slow runs, not failures)."""
    attempt: int
    detected_at: dt.datetime
    fault_class: str = "unknown"
    last_step: int | None = None


@dataclass(frozen=True)
class Save:
    attempt: int
    step: int
    at: dt.datetime


@dataclass(frozen=True)
class LostTime:
    attempt: int
    fault_class: str
    failed_step: int | None
    checkpoint_step: int | None
    """The last checkpoint saved before the failure (any attempt); None: none seen."""
    resumed_step: int | None
    """Where the successor resumed: the step its load line named, else the last save at or below its first
    step, else its first step; None: no successor has stepped (yet)."""
    step_time_s: float | None
    """The failed attempt's own seconds per step (first step to last progress)."""
    parts: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return round(sum(v for v in self.parts.values() if v is not None), 3)

    def as_dict(self) -> dict:
        return {"attempt": self.attempt, "fault_class": self.fault_class, "failed_step": self.failed_step,
                "checkpoint_step": self.checkpoint_step, "resumed_step": self.resumed_step,
                "step_time_s": None if self.step_time_s is None else round(self.step_time_s, 4),
                "parts_s": dict(self.parts), "lost_s": self.total_s}


@dataclass(frozen=True)
class Goodput:
    failures: tuple[LostTime, ...]
    saves: tuple[Save, ...]
    wall_s: float | None
    productive_s: float | None

    @property
    def ettr(self) -> float | None:
        if not self.wall_s or self.productive_s is None:
            return None
        return round(min(max(self.productive_s / self.wall_s, 0.0), 1.0), 4)

    def lost_by_part(self) -> dict[str, float]:
        return {p: round(sum(f.parts.get(p) or 0.0 for f in self.failures), 3) for p in PARTS}

    def as_dict(self) -> dict:
        return {"ettr": self.ettr, "wall_s": _r(self.wall_s), "productive_s": _r(self.productive_s),
                "lost_s": round(sum(f.total_s for f in self.failures), 3), "lost_by_part_s": self.lost_by_part(),
                "failures": [f.as_dict() for f in self.failures],
                "checkpoints": [{"attempt": s.attempt, "step": s.step, "at": s.at.isoformat()} for s in self.saves]}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _s(a: dt.datetime | None, b: dt.datetime | None) -> float | None:
    """b - a in seconds, at least 0; None when either is unknown."""
    if a is None or b is None:
        return None
    return round(max((b - a).total_seconds(), 0.0), 3)


def _one(facts: Iterable[Fact], attempt: int, kind: str) -> Fact | None:
    """The attempt's first fact of a kind (the ledger keeps one; the earliest wins if given more)."""
    found = [f for f in facts if f.attempt == attempt and f.kind == kind]
    return min(found, key=lambda f: f.at) if found else None


def completed_saves(facts: Iterable[Fact], failed_steps: Mapping[int, int | None] | None = None) -> tuple[Save, ...]:
    """The checkpoints known saved, oldest first: each `saved` fact with a step, and each `save_started`
    whose end was not seen but after which the attempt stepped further (a save blocks training: steps
    after it mean it was written; HF Trainer and Lightning print no end line). `failed_steps`: attempt ->
    the step its anomaly named, a step past the save like any other."""
    facts = list(facts)
    failed_steps = failed_steps or {}
    saves: dict[tuple[int, int], Save] = {}
    for f in facts:
        if f.kind == "saved" and f.step is not None:
            key = (f.attempt, f.step)
            if key not in saves or f.at < saves[key].at:
                saves[key] = Save(f.attempt, f.step, f.at)
    # Per attempt, the highest step any fact at or after a time names (a suffix maximum over its facts in
    # time order): a job saving every few minutes for weeks has thousands of facts, read at each decision.
    timeline: dict[int, tuple[list[dt.datetime], list[int]]] = {}
    for g in sorted((g for g in facts if g.step is not None and g.kind in _LATER), key=lambda g: g.at):
        times, steps = timeline.setdefault(g.attempt, ([], []))
        times.append(g.at)
        steps.append(g.step)
    for times, steps in timeline.values():
        for i in range(len(steps) - 2, -1, -1):
            steps[i] = max(steps[i], steps[i + 1])
    for f in facts:
        if f.kind != "save_started" or f.step is None or (f.attempt, f.step) in saves:
            continue
        failed = failed_steps.get(f.attempt)
        times, steps = timeline.get(f.attempt, ([], []))
        i = bisect.bisect_left(times, f.at)
        if (failed is not None and failed > f.step) or (i < len(steps) and steps[i] > f.step):
            saves[(f.attempt, f.step)] = Save(f.attempt, f.step, f.at)
    return tuple(sorted(saves.values(), key=lambda s: (s.at, s.attempt, s.step)))


def last_save_before(saves: Iterable[Save], attempt: int, at: dt.datetime | None = None) -> Save | None:
    """The newest checkpoint saved by `attempt` or an earlier one (before `at`, when given)."""
    found = [s for s in saves if s.attempt <= attempt and (at is None or s.at <= at)]
    return max(found, key=lambda s: (s.at, s.step)) if found else None


def resumed_from(saves: Iterable[Save], attempt: int, first_step: int | None) -> int | None:
    """The step `attempt` resumed from: the newest save of an earlier attempt at or below its first step
    (frameworks print their first step a log interval after it), else that first step itself."""
    if first_step is None:
        return None
    below = [s.step for s in saves if s.attempt < attempt and s.step <= first_step]
    return max(below) if below else first_step


def step_time(facts: Iterable[Fact], attempt: int) -> float | None:
    """The attempt's own seconds per step, from its first step to its last progress (pauses included:
    saves and evaluations belong to its pace)."""
    facts = list(facts)
    first, last = _one(facts, attempt, "first_step"), _one(facts, attempt, "last_progress")
    if first is None or last is None or first.step is None or last.step is None or last.step <= first.step:
        return None
    seconds = (last.at - first.at).total_seconds()
    return seconds / (last.step - first.step) if seconds > 0 else None


def lost_time(failure: Failure, facts: Iterable[Fact], saves: Iterable[Save],
              attempts: Mapping[int, Attempt]) -> LostTime:
    facts, saves = list(facts), list(saves)
    k = failure.attempt
    last = _one(facts, k, "last_progress")
    record = attempts.get(k)
    failed = next((s for s in (last.step if last else None, failure.last_step,
                               record.high_step if record else None) if s is not None), None)
    checkpoint = last_save_before(saves, k, last.at if last else failure.detected_at)
    succ = attempts.get(k + 1)
    first_next = _one(facts, k + 1, "first_step")
    load = _one(facts, k + 1, "loaded")  # a load line names the step itself
    resumed = load.step if load is not None and load.step is not None else \
        resumed_from(saves, k + 1, first_next.step if first_next else None)
    pace = step_time(facts, k)
    base = resumed if resumed is not None else (checkpoint.step if checkpoint else None)
    if base is None:
        first = _one(facts, k, "first_step")
        base = 0 if first is not None else None  # no checkpoint: a restart begins from the start
    redo = max(failed - base, 0) if failed is not None and base is not None else None
    if redo is not None and pace is not None:
        recomputation: float | None = round(redo * pace, 3)
    elif checkpoint is not None and checkpoint.attempt == k and last is not None:
        recomputation = _s(checkpoint.at, last.at)  # no pace: the wall time since the save
    else:
        recomputation = None
    running = succ.running_at if succ is not None else None
    warmup = None
    back = _one(facts, k + 1, "caught_up")
    if back is not None and first_next is not None and redo is not None and pace is not None:
        warmup = round(max((back.at - first_next.at).total_seconds() - redo * pace, 0.0), 3)
    parts = {"recomputation": recomputation,
             "detection": _s(last.at, failure.detected_at) if last is not None else None,
             "recovery": _s(failure.detected_at, running),
             "startup": _s(running, first_next.at if first_next else None),
             "warmup": warmup}
    return LostTime(k, failure.fault_class, failed, checkpoint.step if checkpoint else None,
                    resumed, pace, parts)


def goodput(attempts: Iterable[Attempt], failures: Iterable[Failure], facts: Iterable[Fact],
            now: dt.datetime, ended_at: dt.datetime | None = None) -> Goodput:
    """A job's figures. `failures`: each failed attempt's first anomaly; `ended_at`: when the job ended
    for good (None: still going, the wall time runs to `now`)."""
    facts = list(facts)
    by_index = {a.index: a for a in attempts}
    first_failures: dict[int, Failure] = {}
    for f in sorted(failures, key=lambda f: f.detected_at):
        first_failures.setdefault(f.attempt, f)
    failed_steps = {k: f.last_step for k, f in first_failures.items()}
    saves = completed_saves(facts, failed_steps)
    lost = tuple(lost_time(f, facts, saves, by_index) for _, f in sorted(first_failures.items()))
    starts = [a.running_at or a.first_seen for a in by_index.values() if (a.running_at or a.first_seen)]
    start = min(starts, default=None)
    firsts = [f.at for f in facts if f.kind == "first_step"]
    if start is None and firsts:
        start = min(firsts)
    end = ended_at or now
    wall = _s(start, end) if start is not None else None
    active = 0.0
    seen = False
    for index in sorted({f.attempt for f in facts if f.kind == "first_step"}):
        first = _one(facts, index, "first_step")
        last = _one(facts, index, "last_progress")
        record = by_index.get(index)
        if last is not None:
            until = last.at
        elif index in first_failures:
            until = first_failures[index].detected_at
        else:  # no failure: still stepping, or ended well
            until = (record.ended_at if record is not None and record.ended_at else None) or end
        active += _s(first.at, until) or 0.0
        seen = True
    wasted = sum((f.parts.get("recomputation") or 0.0) + (f.parts.get("warmup") or 0.0) for f in lost)
    productive = round(max(active - wasted, 0.0), 3) if seen else None
    return Goodput(lost, saves, wall, productive)
