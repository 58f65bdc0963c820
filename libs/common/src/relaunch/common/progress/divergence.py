"""Silent divergence: training goes on, but wrongly (docs/policy.md, "Divergence"). Pure: a frozen state
that each progress point or overflow mark replaces; the verdict reads the state.

What counts, and why:
- a NaN or infinite loss or grad norm in `nonfinite_reports` consecutive reports (a finite value in
  between starts the count again). One bad report is not enough: fp16 dynamic loss scaling skips an
  overflowing step and logs its grad norm as inf/nan, then recovers;
- a loss-scale collapse: an overflow lowered the dynamic loss scale to `min_loss_scale` or below, or the
  scaler says it is already at its minimum (DeepSpeed), or a Megatron loss scale that fell to the
  minimum from above (a bf16 run prints `loss scale: 1.0` on every line: only a fall counts);
- a storm of skipped steps: at least `storm_skips` of the last `storm_window` steps skipped (overflow
  lines, Megatron's `number of skipped iterations`, DeepSpeed's running `skipped=` total). The skips
  before the first step that went through are the scaler searching for its level at start, not a storm;
- a late overflow storm that drags the loss scale down: once steps have gone through, overflows that
  lower the scale by `storm_fall` (32x: from 64 to 2) or more without it growing back in between and
  without a clean window of `storm_window` steps. Dynamic loss scaling recovers from a spike in one
  or two halvings; five in a row, hours into a run, are the gradients running away.
Detection is within `nonfinite_reports` (3) logged steps of the first bad value.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

from .parsing import OverflowMark, ProgressPoint

STATE_VERSION = 1


@dataclass(frozen=True)
class DivergencePolicy:
    nonfinite_reports: int = 3
    min_loss_scale: float = 1.0
    storm_window: int = 20
    storm_skips: int = 10
    storm_fall: float = 32.0

    def __post_init__(self) -> None:
        if not 1 <= self.nonfinite_reports <= 100 or not 1 <= self.storm_skips <= self.storm_window <= 1000 \
                or not self.storm_fall > 1:
            raise ValueError("divergence policy needs 1 <= nonfinite_reports <= 100, "
                             "1 <= storm_skips <= storm_window <= 1000 and storm_fall > 1")


@dataclass(frozen=True)
class DivergenceState:
    bad_run: int = 0
    """Consecutive reports with a non-finite loss or grad norm."""
    first_bad_step: int | None = None
    bad_what: str | None = None
    last_step: int | None = None
    calibrated: bool = False
    """A step went through without a skip: later skips are no longer the scaler's start-up search."""
    recent: str = ""
    """The last storm_window steps, oldest first: 's' skipped, '.' went through."""
    skipped_total: int | None = None
    last_scale: float | None = None
    collapsed: str | None = None
    """Why the loss scale is read as collapsed, once it is."""
    fall_from: float | None = None
    """The loss scale the current late fall of overflows began at (None: no fall under way)."""

    def to_dict(self) -> dict[str, Any]:
        data = {"v": STATE_VERSION, "bad_run": self.bad_run, "first_bad_step": self.first_bad_step,
                "bad_what": self.bad_what, "last_step": self.last_step, "calibrated": self.calibrated,
                "recent": self.recent, "skipped_total": self.skipped_total, "last_scale": self.last_scale,
                "collapsed": self.collapsed}
        if self.fall_from is not None:  # (additive: a record without it is read as no fall under way)
            data["fall_from"] = self.fall_from
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DivergenceState:
        """A stored state; a missing one (a record written before divergence existed) is a fresh state."""
        if not data:
            return cls()
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"divergence state version {data.get('v')!r} is not {STATE_VERSION}")
        try:
            return cls(bad_run=int(data["bad_run"]), first_bad_step=data["first_bad_step"],
                       bad_what=data["bad_what"], last_step=data["last_step"], calibrated=bool(data["calibrated"]),
                       recent=str(data["recent"]), skipped_total=data["skipped_total"],
                       last_scale=data["last_scale"], collapsed=data["collapsed"], fall_from=data.get("fall_from"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"divergence state is malformed: {exc}") from exc


@dataclass(frozen=True)
class Divergence:
    signature_id: str
    """divergence_nonfinite | divergence_loss_scale | divergence_skip_storm"""
    step: int | None
    reason: str


def observe(state: DivergenceState, mark: ProgressPoint | OverflowMark,
            policy: DivergencePolicy = DivergencePolicy()) -> DivergenceState:
    if isinstance(mark, OverflowMark):
        state = _steps(state, "s", policy)
        if state.collapsed is None:
            if mark.at_minimum:
                state = _replace(state, collapsed="the fp16 loss scaler reports it is already at its minimum "
                                                 "and cannot lower the loss scale any further")
            elif mark.new_scale is not None and mark.new_scale <= policy.min_loss_scale:
                state = _replace(state, collapsed=f"an fp16 overflow lowered the loss scale to {mark.new_scale:g}")
            elif mark.new_scale is not None and state.calibrated:
                state = _fall(state, mark.new_scale, policy)
        return _replace(state, last_scale=mark.new_scale if mark.new_scale is not None else state.last_scale)
    health = mark.health
    if health is None:
        return observe_step(state, mark.step, policy)
    step = mark.step if mark.step is not None else state.last_step
    if mark.step is not None and state.last_step is not None and mark.step < state.last_step:
        state = _replace(state, last_step=mark.step)  # a restart from a checkpoint or a new counter: not a step
    # skipped steps: Megatron's per log interval, DeepSpeed's running total
    skipped = health.skipped
    if health.skipped_total is not None:
        if state.skipped_total is not None and health.skipped_total >= state.skipped_total:
            skipped = health.skipped_total - state.skipped_total
        state = _replace(state, skipped_total=health.skipped_total)
    advanced = 0
    if mark.step is not None and (state.last_step is None or mark.step > state.last_step):
        advanced = mark.step - state.last_step if state.last_step is not None else 1
        state = _replace(state, last_step=mark.step)
    if advanced:
        skips = min(skipped or 0, advanced)
        state = _steps(state, "." * min(advanced - skips, policy.storm_window) + "s" * min(skips, policy.storm_window),
                       policy)
    if health.loss_scale is not None:
        previous = state.last_scale
        if (state.collapsed is None and previous is not None and previous > policy.min_loss_scale
                and health.loss_scale <= policy.min_loss_scale and (skipped or 0) > 0):
            state = _replace(state, collapsed=f"the loss scale fell from {previous:g} to {health.loss_scale:g} "
                                             f"while steps were being skipped")
        state = _replace(state, last_scale=health.loss_scale)
    what = health.non_finite()
    if what is None:
        if health.loss is not None or health.grad_norm is not None:
            state = _replace(state, bad_run=0, first_bad_step=None, bad_what=None)
        return state
    if state.bad_run == 0:
        return _replace(state, bad_run=1, first_bad_step=step, bad_what=what)
    return _replace(state, bad_run=state.bad_run + 1)


def observe_step(state: DivergenceState, step: int | None, policy: DivergencePolicy = DivergencePolicy()
                 ) -> DivergenceState:
    """observe for a progress point without loss figures (`health` None), given its step: what most
    reports of most jobs are (the detector calls it without making the point)."""
    if step is None:
        return state
    last = state.last_step
    if last is not None and step < last:
        return _replace(state, last_step=step)  # a restart from a checkpoint or a new counter: not a step
    if last is None or step > last:
        if state.calibrated and state.recent == _went_through(policy.storm_window):
            # (most reports of most jobs: the window is all steps that went through, and stays so)
            return _replace(state, last_step=step)
        return _replace(_steps(state, "." * min(step - (last or step - 1), policy.storm_window), policy),
                        last_step=step)
    return state


def with_last_step(state: DivergenceState, step: int | None) -> DivergenceState:
    """`state` with another last step (a copy without dataclasses.replace's per-field work)."""
    return _replace(state, last_step=step)


def _replace(state: DivergenceState, **changes: Any) -> DivergenceState:
    """dataclasses.replace without its per-field work: observe runs for every progress report of every
    job, and replace made it a quarter of the detector's progress tracking. (DivergenceState has no
    __post_init__ to skip.)"""
    new = object.__new__(DivergenceState)
    fields = new.__dict__
    fields.update(state.__dict__)
    fields.update(changes)
    return new


def _fall(state: DivergenceState, new_scale: float, policy: DivergencePolicy) -> DivergenceState:
    """A late overflow lowered the scale to `new_scale`: where the fall began (the scale the scaler tried
    at its first overflow: twice the new one, as DeepSpeed's and apex's scalers halve it), anew when the
    scale grew back since the last overflow; collapsed once it fell storm_fall-fold."""
    began = state.fall_from
    if began is None or (state.last_scale is not None and new_scale > state.last_scale):
        began = new_scale * 2
    if new_scale * policy.storm_fall <= began:
        return _replace(state, fall_from=began, collapsed=(
            f"fp16 overflows lowered the loss scale from {began:g} to {new_scale:g} after training had been "
            f"running (a late overflow storm, not the scaler's start-up search)"))
    return _replace(state, fall_from=began)


@functools.cache
def _went_through(window: int) -> str:
    return "." * window


def _steps(state: DivergenceState, marks: str, policy: DivergencePolicy) -> DivergenceState:
    if not marks:
        return state
    calibrated = state.calibrated
    if not calibrated:
        if "." not in marks:
            return state  # the scaler's start-up search: not counted
        marks = marks[marks.index("."):]
        calibrated = True
    recent = (state.recent + marks)[-policy.storm_window:]
    if state.fall_from is not None and len(recent) >= policy.storm_window and "s" not in recent:
        return _replace(state, calibrated=calibrated, recent=recent, fall_from=None)  # a clean window: it is over
    return _replace(state, calibrated=calibrated, recent=recent)


def verdict(state: DivergenceState, policy: DivergencePolicy = DivergencePolicy()) -> Divergence | None:
    if state.bad_run >= policy.nonfinite_reports:
        at = f" since step {state.first_bad_step}" if state.first_bad_step is not None else ""
        return Divergence("divergence_nonfinite", state.last_step,
                          f"training diverged: the {state.bad_what} has been NaN or infinite in {state.bad_run} "
                          f"consecutive progress reports{at}; the run is producing garbage, so relaunch stops it "
                          f"rather than let it burn its allocation (restart from a checkpoint before the first bad "
                          f"step with a lower learning rate, or bf16)")
    if state.collapsed is not None:
        return Divergence("divergence_loss_scale", state.last_step,
                          f"training diverged: {state.collapsed}; steps overflow in fp16 and are skipped, so the "
                          f"model no longer learns")
    skips = state.recent.count("s")
    if len(state.recent) >= policy.storm_window and skips >= policy.storm_skips:
        return Divergence("divergence_skip_storm", state.last_step,
                          f"training diverged: {skips} of the last {len(state.recent)} steps were skipped for fp16 "
                          f"overflow (dynamic loss scaling is not recovering), so the model barely learns")
    return None
