"""Hang detection: no forward progress for longer than the job's own rhythm allows.

Pure: the state is a frozen value that each observation replaces; time is passed in (seconds since
the epoch as a float, or an aware datetime) and stored as float seconds.

How the timeout is chosen, and why:
- Calibrated from the job's own step intervals (the gaps between log lines that show a new step):
  `max(floor_s, multiplier x p<percentile> of the last <window> intervals)`. A high percentile, not
  the mean, so that the occasional slow step (data-loader stall, GC, evaluation) sets the pace rather
  than being flagged; the floor keeps fast jobs from being declared hung on a hiccup.
- Before the job has shown `min_intervals` intervals (start-up: model load, compile, data index
  build), the longer `warmup_s` allowance applies, counted from the last sign of life.
- A pause in progress (a checkpoint save or an evaluation phase, recognised from the framework's own
  lines: relaunch.common.progress.phases) has its own allowance, `max(checkpoint_s, checkpoint_multiplier
  x the longest pause seen)`, from the moment it started; a pause that ended restarts the clock, and an
  interval that spans one is never learnt as a step interval. The pause a job takes is learnt per job:
  the longest healthy one seen (a pause whose end was seen; one seen only at its end, as Megatron-LM's
  and torchtitan's evaluations are, lasted the silence before that line).
- A pause in the job's own rhythm is allowed once it has been seen once: the steps after which pauses
  ended are kept, and while the job is silent after a step in that rhythm (a multiple of their greatest
  common divisor: every N steps), it has `checkpoint_multiplier x the longest pause seen` even though no
  line announced the pause. (A pause after step 0 or 1 is start-up, and says nothing of a rhythm.)
- The floor is minutes on a real cluster (the detector's hang_floor_s, docs/operator-guide.md): the
  first pause of a kind no line announces must fit under it before it can be learnt.

Invariants: a step equal to the last one is a duplicate (many ranks print the same step) and changes
nothing; a step below the last one (restart from a checkpoint, an evaluation bar, a new epoch's
counter) is a sign of life but teaches no interval, so lagging ranks cannot shrink the timeout. A
progress point without a step (HF's loss dicts) counts as forward progress. Start a fresh state for
each attempt of a job: the restarted process's start-up deserves the warm-up allowance again (what
was learnt of the job's pauses carries over: track.ProgressTrack.carrying).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping

from .clock import seconds, when

STATE_VERSION = 1
MAX_WINDOW = 256
"""The state keeps at most this many intervals whatever the policy: it lives in Redis."""
MAX_PAUSE_STEPS = 8
"""The steps after which the latest pauses ended (the job's rhythm) that a state keeps."""
SHADOW_STEPS = 25
"""Steps after a pause whose printed rates are no straggler samples (in_pause_shadow)."""


@dataclass(frozen=True)
class HangPolicy:
    floor_s: float = 600.0
    """The shortest timeout ever used: 10 minutes, as NCCL's watchdog and AWS HyperPod's example rule
    (no step line for 10 minutes) wait, so that a pause no line announces (a data reload, a slow
    evaluation) is not a hang on its first occurrence. Test stacks set seconds (docs/operator-guide.md)."""
    multiplier: float = 5.0
    """Timeout = multiplier x the high percentile of recent step intervals (when above the floor)."""
    percentile: float = 95.0
    """Which percentile of the recent intervals sets the pace (nearest-rank)."""
    window: int = 100
    """How many recent step intervals are kept for calibration."""
    min_intervals: int = 3
    """Intervals needed before the calibrated timeout replaces the warm-up allowance."""
    warmup_s: float = 1800.0
    """Allowance before the job is calibrated: start-up (model load, compile, dataset index) is slow."""
    checkpoint_s: float = 900.0
    """Least allowance for a checkpoint save in progress (large saves to a shared filesystem)."""
    checkpoint_multiplier: float = 3.0
    """A save or an evaluation may take this many times the longest pause seen so far, when that is
    above checkpoint_s; a pause in the job's rhythm, this many times the longest (the margin)."""

    def __post_init__(self) -> None:
        positive = {"floor_s": self.floor_s, "warmup_s": self.warmup_s, "checkpoint_s": self.checkpoint_s}
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"hang policy {name} must be a positive number of seconds, not {value!r}")
        if not (self.multiplier >= 1 and self.checkpoint_multiplier >= 1):
            raise ValueError("hang policy multipliers must be at least 1")
        if not 0 < self.percentile <= 100:
            raise ValueError(f"hang policy percentile must be in (0, 100], not {self.percentile!r}")
        if not 1 <= self.min_intervals <= self.window <= MAX_WINDOW:
            raise ValueError(f"hang policy needs 1 <= min_intervals <= window <= {MAX_WINDOW}")


OPTION_FIELDS = {
    "hang_timeout": "floor_s",
    "hang_multiplier": "multiplier",
    "hang_warmup": "warmup_s",
    "hang_checkpoint": "checkpoint_s",
}
"""Per-job option names (as a job comment would spell them) -> HangPolicy fields."""


def policy_with_options(base: HangPolicy, options: Mapping[str, float]) -> HangPolicy:
    """`base` with the job's overrides applied. Keys outside OPTION_FIELDS belong to other readers of
    the job's options and are left alone; bad values raise ValueError (from HangPolicy)."""
    changes = {OPTION_FIELDS[key]: float(value) for key, value in options.items() if key in OPTION_FIELDS}
    return replace(base, **changes) if changes else base


@dataclass(frozen=True)
class HangState:
    watched_since: float
    """When watching this attempt began: the warm-up allowance counts from here before any step."""
    last_step: int | None = None
    high_step: int | None = None
    """The highest step seen: only steps above it teach an interval."""
    progress_at: float | None = None
    """The last sign of life that was a step (forward, or a counter reset)."""
    intervals: tuple[float, ...] = ()
    save_started_at: float | None = None
    """Set while a checkpoint save is in progress (the earliest start line of that save)."""
    save_ended_at: float | None = None
    longest_save_s: float = 0.0
    gap_has_save: bool = False
    """The gap since progress_at contains a save, so it is not a step interval."""
    pause_steps: tuple[int, ...] = ()
    """The steps after which the latest healthy pauses ended (with_pause_step): the job's rhythm."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (tuples are arrays to json and orjson; not copied into lists: states are written for every report)."""
        return {"v": STATE_VERSION, "watched_since": self.watched_since, "last_step": self.last_step,
                "high_step": self.high_step, "progress_at": self.progress_at, "intervals": self.intervals,
                "save_started_at": self.save_started_at, "save_ended_at": self.save_ended_at,
                "longest_save_s": self.longest_save_s, "gap_has_save": self.gap_has_save,
                "pause_steps": list(self.pause_steps)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HangState:
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"hang state version {data.get('v')!r} is not {STATE_VERSION}")
        try:
            return cls(watched_since=float(data["watched_since"]), last_step=_opt(int, data["last_step"]),
                       high_step=_opt(int, data["high_step"]), progress_at=_opt(float, data["progress_at"]),
                       intervals=tuple(float(x) for x in data["intervals"]),
                       save_started_at=_opt(float, data["save_started_at"]),
                       save_ended_at=_opt(float, data["save_ended_at"]),
                       longest_save_s=float(data["longest_save_s"]), gap_has_save=bool(data["gap_has_save"]),
                       # (added in version 1: states written before have none)
                       pause_steps=tuple(int(x) for x in data.get("pause_steps") or ())[-MAX_PAUSE_STEPS:])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"hang state is malformed: {exc}") from exc

    @staticmethod
    def high_step_of(data: Mapping[str, Any]) -> int | None:
        """from_dict(data).high_step, without making the state (its intervals) to read one number."""
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"hang state version {data.get('v')!r} is not {STATE_VERSION}")
        try:
            return _opt(int, data["high_step"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"hang state is malformed: {exc}") from exc

    @classmethod
    def from_own_dict(cls, data: Mapping[str, Any]) -> HangState:
        """from_dict for what to_dict of this very process made (no checks: it runs for every report)."""
        return cls(watched_since=data["watched_since"], last_step=data["last_step"], high_step=data["high_step"],
                   progress_at=data["progress_at"], intervals=tuple(data["intervals"]),
                   save_started_at=data["save_started_at"], save_ended_at=data["save_ended_at"],
                   longest_save_s=data["longest_save_s"], gap_has_save=data["gap_has_save"],
                   pause_steps=tuple(data["pause_steps"]))


@dataclass(frozen=True)
class Hang:
    last_step: int | None
    last_progress_at: float | None
    silent_s: float
    timeout_s: float
    deadline: float
    during_save: bool
    reason: str


def new_state(now: float | dt.datetime) -> HangState:
    return HangState(watched_since=seconds(now))


def observe_progress(state: HangState, step: int | None, now: float | dt.datetime,
                     keep: int = MAX_WINDOW, printed_s: float | None = None) -> HangState:
    """A progress line (or client progress event) at `now`; `step` None means progress of unknown size.
    Only the newest `keep` intervals are kept (HangPolicy.window: what the verdict reads).
    `printed_s`: the time per step the line itself prints (Megatron's elapsed time per iteration, a
    bar's s/it), if any. Lines read in one batch (a detector or follower that starts again and reads
    what the job printed meanwhile) share one `now`, so their gaps say nothing; the printed time, times
    the steps the line advanced, stands in for the gap, and the job's pace is known at once instead of
    after the warm-up allowance."""
    now = seconds(now)
    if step is not None and step == state.last_step:
        return state  # the same step from another rank, or printed twice
    backwards = step is not None and state.last_step is not None and step < state.last_step
    new_high = step is None or state.high_step is None or step > state.high_step
    intervals = state.intervals
    # Lines read in one batch share one `now`: a zero gap says nothing about the job's pace, so it is
    # not learnt (the pace learnt is then "how often new steps show up", which is what silence is
    # measured against).
    learn = (not backwards and new_high and state.progress_at is not None and not state.gap_has_save
             and now > state.progress_at)
    if learn:
        # (to the microsecond: the state is stored for every report, and 17-digit floats double its size)
        intervals = (intervals + (round(now - state.progress_at, 6),))[-max(1, min(keep, MAX_WINDOW)):]
    elif (printed_s is not None and 0 < printed_s < math.inf and not backwards and new_high
          and state.progress_at is not None and not state.gap_has_save and now <= state.progress_at):
        steps = step - state.high_step if step is not None and state.high_step is not None else 1
        intervals = (intervals + (round(printed_s * max(1, steps), 6),))[-max(1, min(keep, MAX_WINDOW)):]
    save_started_at, longest, ended = state.save_started_at, state.longest_save_s, state.save_ended_at
    pauses = state.pause_steps
    if save_started_at is not None and not backwards:
        # Training moved on: the save is over even if no end line came (HF prints none; async saves
        # return to training at once). Its length up to here is an upper bound worth remembering.
        # (A lagging rank's older step says nothing about the save, so it does not end it.)
        longest, save_started_at, ended = max(longest, now - save_started_at), None, now
        pauses = with_pause_step(pauses, state.high_step)
    high = state.high_step if step is None else max(step, state.high_step if state.high_step is not None else step)
    # (the constructor, not dataclasses.replace: this runs for every progress report, and replace costs 3x)
    return HangState(watched_since=state.watched_since, last_step=step if step is not None else state.last_step,
                     high_step=high, progress_at=now, intervals=intervals, save_started_at=save_started_at,
                     save_ended_at=ended, longest_save_s=longest, gap_has_save=False, pause_steps=pauses)


def observe_checkpoint(state: HangState, phase: Literal["started", "finished"], now: float | dt.datetime
                       ) -> HangState:
    now = seconds(now)
    if phase == "started":
        if state.save_started_at is not None:
            return state  # every rank announces the same save; the first announcement counts
        return replace(state, save_started_at=now, gap_has_save=True)
    if phase != "finished":
        raise ValueError(f"checkpoint phase must be 'started' or 'finished', not {phase!r}")
    # An end line with no start seen is still a sign of life after a pause (Megatron-LM and torchtitan
    # print their evaluation's only at its end): it lasted the silence before it, an upper bound worth
    # remembering. The clock restarts from here either way.
    longest = max(state.longest_save_s, pause_length(state, now))
    return replace(state, save_started_at=None, save_ended_at=now, longest_save_s=longest, gap_has_save=True,
                   pause_steps=with_pause_step(state.pause_steps, state.high_step))


def pause_length(state: HangState, now: float) -> float:
    """How long the pause that ends at `now` lasted: since its start line, else since the last sign of
    life before it (0 when there was none: start-up is not a pause)."""
    if state.save_started_at is not None:
        return now - state.save_started_at
    if state.progress_at is None:
        return 0.0
    last = state.progress_at if state.save_ended_at is None else max(state.progress_at, state.save_ended_at)
    return max(0.0, now - last)


def with_pause_step(steps: tuple[int, ...], step: int | None) -> tuple[int, ...]:
    """`steps` with the step after which a pause ended, last (none after step 0 or 1: start-up)."""
    if step is None or step <= 1 or (steps and steps[-1] == step):
        return steps
    return (tuple(s for s in steps if s != step) + (step,))[-MAX_PAUSE_STEPS:]


def in_pause_shadow(steps: tuple[int, ...], step: int | None) -> bool:
    """Whether a rate printed at `step` still says the latest pause more than the job's pace: a progress
    bar's rate is an average (tqdm's decays by 0.7 a redraw), so for about SHADOW_STEPS steps after a
    90 s evaluation it reads a fraction of the job's pace. Such samples are not the straggler watch's."""
    return bool(steps) and step is not None and steps[-1] < step <= steps[-1] + SHADOW_STEPS


def rhythm(steps: tuple[int, ...]) -> int | None:
    """Every how many steps the job pauses (the greatest common divisor of the steps its pauses ended
    after), None while no pause was seen, or when they share no rhythm."""
    period = math.gcd(*steps) if steps else 0
    return period if period >= 2 else None


def rhythm_allowance_s(state: HangState, policy: HangPolicy) -> float:
    """The silence allowed after a step in the job's rhythm: checkpoint_multiplier x the longest pause
    seen; 0 when the job is not at such a step."""
    if state.longest_save_s <= 0 or not state.pause_steps or state.high_step is None:
        return 0.0
    period = rhythm(state.pause_steps)
    if period is None or state.high_step % period:
        return 0.0
    return policy.checkpoint_multiplier * state.longest_save_s


def timeout_s(state: HangState, policy: HangPolicy) -> tuple[float, str]:
    """The allowed silence after the last sign of life, and why it is that long."""
    recent = state.intervals[-policy.window:]
    if state.progress_at is None:
        return policy.warmup_s, f"warm-up allowance {policy.warmup_s:g} s before the first step"
    if len(recent) < policy.min_intervals:
        return policy.warmup_s, (f"warm-up allowance {policy.warmup_s:g} s: only {len(recent)} step interval(s) "
                                 f"seen, {policy.min_intervals} needed to calibrate")
    pace = percentile(recent, policy.percentile)
    scaled = policy.multiplier * pace
    why = (f"{policy.multiplier:g} x p{policy.percentile:g} {pace:.3g} s of the last {len(recent)} step intervals "
           f"= {scaled:.3g} s")
    if scaled >= policy.floor_s:
        return scaled, why
    return policy.floor_s, f"floor {policy.floor_s:g} s (above {why})"


def save_allowance_s(state: HangState, policy: HangPolicy) -> tuple[float, str]:
    learnt = policy.checkpoint_multiplier * state.longest_save_s
    if learnt > policy.checkpoint_s:
        return learnt, (f"{policy.checkpoint_multiplier:g} x the longest pause seen "
                        f"({state.longest_save_s:.3g} s) = {learnt:.3g} s")
    return policy.checkpoint_s, f"checkpoint allowance {policy.checkpoint_s:g} s"


def deadline(state: HangState, policy: HangPolicy) -> float:
    """When the job is hung unless it shows life first: the score for a sweep over many jobs. The same
    number as verdict's, without the reason texts (this runs for every progress report)."""
    anchor = max(t for t in (state.watched_since, state.progress_at, state.save_ended_at) if t is not None)
    intervals = state.intervals
    recent = intervals if len(intervals) <= policy.window else intervals[-policy.window:]
    if state.progress_at is None or len(recent) < policy.min_intervals:
        timeout = policy.warmup_s
    elif policy.multiplier * max(recent) <= policy.floor_s:
        timeout = policy.floor_s  # the percentile is at most the largest: no need to sort for it
    else:
        timeout = max(policy.multiplier * percentile(recent, policy.percentile), policy.floor_s)
    due = anchor + timeout
    if state.save_started_at is not None:
        learnt = policy.checkpoint_multiplier * state.longest_save_s
        allowance = learnt if learnt > policy.checkpoint_s else policy.checkpoint_s
        if state.save_started_at + allowance > due:
            return state.save_started_at + allowance
    elif state.pause_steps and (rhythmic := rhythm_allowance_s(state, policy)) > timeout:
        return anchor + rhythmic
    return due


def verdict(state: HangState, policy: HangPolicy, now: float | dt.datetime) -> Hang | None:
    now = seconds(now)
    due, timeout, why, during_save, anchor = _deadline(state, policy)
    if now < due:
        return None
    silent = now - anchor
    if during_save:
        reason = (f"a checkpoint save or an evaluation started at {when(state.save_started_at)} has not "
                  f"finished after {now - state.save_started_at:.0f} s; allowed {why}")
    elif state.progress_at is None:
        reason = (f"no training step seen in {silent:.0f} s since {when(anchor)} "
                  f"(watched since {when(state.watched_since)}); timeout {timeout:.3g} s: {why}")
    else:
        step = f"step {state.last_step}" if state.last_step is not None else "the last progress line"
        after_save = f", last checkpoint save ended at {when(anchor)}" if anchor != state.progress_at else ""
        reason = (f"no progress since {step} at {when(state.progress_at)}{after_save} ({silent:.0f} s of "
                  f"silence); timeout {timeout:.3g} s: {why}")
    return Hang(state.last_step, state.progress_at, silent, timeout, due, during_save, reason)


def percentile(values: tuple[float, ...] | list[float], pct: float) -> float:
    """Nearest-rank percentile: always one of the values, so a single outlier is never interpolated in."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100.0 * len(ordered)) - 1)]


def _deadline(state: HangState, policy: HangPolicy) -> tuple[float, float, str, bool, float]:
    anchor = max(t for t in (state.watched_since, state.progress_at, state.save_ended_at) if t is not None)
    timeout, why = timeout_s(state, policy)
    due = anchor + timeout
    if state.save_started_at is not None:
        allowance, save_why = save_allowance_s(state, policy)
        if state.save_started_at + allowance > due:
            return state.save_started_at + allowance, allowance, save_why, True, anchor
    elif (rhythmic := rhythm_allowance_s(state, policy)) > timeout:
        why = (f"a pause in the job's rhythm (after every {rhythm(state.pause_steps)} steps): "
               f"{policy.checkpoint_multiplier:g} x the longest pause seen ({state.longest_save_s:.3g} s)")
        return anchor + rhythmic, rhythmic, why, False, anchor
    return due, timeout, why, False, anchor


def _opt(kind, value):
    return None if value is None else kind(value)
