"""A whole log file read the way the detector's live follower reads it (`relaunch progress FILE`): every
line and every '\r' redraw is a frame, each frame goes through parse_line, and the same divergence rules
and hang-timeout calibration are applied. Pure apart from reading the stream it is given."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from ..diagnosis.blocks import iter_text_blocks
from . import divergence, rhythm
from .parsing import CheckpointMark, OverflowMark, parse_line

WINDOW = 100
"""Step intervals kept for the hang timeout (the detector's default window)."""

RICH_ONLY = ("Lightning's Rich progress bar writes nothing to a file that is not a terminal until the run "
             "ends, so relaunch sees no step while the job runs: use pytorch_lightning.callbacks.TQDMProgressBar, "
             "or add relaunch.client.callbacks.LightningProgressCallback() to the Trainer's callbacks "
             "(docs/user-guide.md, \"Progress\")")
NO_STEPS = ("no training step recognised: relaunch cannot tell a hang from a quiet phase (the hang watch is "
            "never armed). Print `step N/M | loss X` lines, or report progress with relaunch.client "
            "(docs/user-guide.md, \"Progress\")")


@dataclass
class Summary:
    """What relaunch reads from one file (mutable while reading; `as_json` is the contract's shape)."""
    file: str
    formats: dict[str, None] = field(default_factory=dict)
    steps: set[int] = field(default_factory=set)
    first_step: int | None = None
    last_step: int | None = None
    step_times: list[float] = field(default_factory=list)
    throughputs: list[float] = field(default_factory=list)
    intervals: list[float] = field(default_factory=list)
    loss_reports: int = 0
    checkpoints: int = 0
    overflows: int = 0
    rich_bar: bool = False
    divergence: divergence.Divergence | None = None
    notes: list[str] = field(default_factory=list)

    def step_time_s(self) -> float | None:
        return _median(self.step_times[-WINDOW:])

    def throughput(self) -> float | None:
        return _median(self.throughputs[-WINDOW:])

    def hang_timeout_s(self) -> float | None:
        found = rhythm.calibrated_timeout_s(self.intervals[-WINDOW:])
        return round(found[0], 3) if found else None

    def as_json(self) -> dict:
        st, tp = self.step_time_s(), self.throughput()
        return {"file": self.file, "formats": list(self.formats), "steps": len(self.steps),
                "first_step": self.first_step, "last_step": self.last_step,
                "step_time_s": round(st, 6) if st is not None else None,
                "throughput": round(tp, 6) if tp is not None else None,
                "hang_timeout_s": self.hang_timeout_s()}


def summarize(name: str, stream: BinaryIO) -> Summary:
    return summarize_frames(name, (frame for block in iter_text_blocks(stream) for frame in block.splitlines()))


def summarize_frames(name: str, frames: Iterable[str]) -> Summary:
    summary = Summary(name)
    state = divergence.DivergenceState()
    high: int | None = None
    for frame in frames:
        if "━" in frame and "Epoch" in frame and "•" in frame:
            summary.rich_bar = True
        mark = parse_line(frame)
        if mark is None:
            continue
        if isinstance(mark, CheckpointMark):
            summary.checkpoints += mark.kind == "save"  # (evaluation lines are pauses too, not saves)
            continue
        summary.formats.setdefault(mark.preset)
        if isinstance(mark, OverflowMark):
            summary.overflows += 1
        state = divergence.observe(state, mark)
        if summary.divergence is None:
            summary.divergence = divergence.verdict(state)
        if isinstance(mark, OverflowMark):
            continue
        if mark.health is not None and (mark.health.loss is not None or mark.health.grad_norm is not None):
            summary.loss_reports += 1
        if mark.step_time_s is not None and math.isfinite(mark.step_time_s):
            summary.step_times.append(mark.step_time_s)
        if mark.throughput is not None and math.isfinite(mark.throughput):
            summary.throughputs.append(mark.throughput)
        if not mark.step:  # no step number, or a bar at 0 (no step done yet): a sign of life only
            continue
        summary.steps.add(mark.step)
        if summary.first_step is None:
            summary.first_step = mark.step
        summary.last_step = mark.step
        if high is not None and mark.step > high:
            # Offline there are no arrival times: the interval between two logged steps is estimated from
            # the step time the job prints (the live detector measures it as lines arrive).
            st = summary.step_time_s()
            if st is not None:
                summary.intervals.append((mark.step - high) * st)
        high = mark.step if high is None else max(high, mark.step)
    if summary.rich_bar and len(summary.steps) <= 1:
        summary.notes.append(RICH_ONLY)
    elif not summary.steps:
        summary.notes.append(NO_STEPS)
    if summary.steps and not summary.notes and summary.hang_timeout_s() is None:
        summary.notes.append("the log prints no step time: the live detector learns the hang timeout from when "
                             "the steps arrive (warm-up allowance 1800 s until 3 step intervals are seen)")
    return summary


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
