"""The hang and straggler rules over the frozen states (hangs.HangState, stragglers.StragglerState), and
their JSON record: the reference the detector's hot path (track.ProgressTrack, which keeps the same state in
place) is checked against, report by report (tests/unit/test_progress_track.py). The service runs
ProgressTrack; only tests run these. Pure."""

from __future__ import annotations

import datetime as dt

from relaunch.common.progress import divergence

from . import hangs, stragglers
from .clock import seconds
from .progress import CheckpointMark, OverflowMark

_FRESH = divergence.DivergenceState()


def advance(current: tuple[int, hangs.HangState, stragglers.StragglerState] | None, attempt: int, marks: list,
             at: dt.datetime | float, hang_keep: int = hangs.MAX_WINDOW, straggler_keep: int = stragglers.MAX_SAMPLES,
             ) -> tuple[hangs.HangState, stragglers.StragglerState] | None:
    """The attempt's states after `marks` seen at `at`; None when they belong to an older attempt than
    the one tracked. A newer attempt starts fresh."""
    # Once, not in each of the pure functions below; to the millisecond, which is all any verdict needs,
    # since the state is stored for every report and 17-digit floats make it half again as long.
    at = round(seconds(at), 3)
    if current is None or current[0] != attempt:
        if current is not None and current[0] > attempt:
            return None
        hang, strag = hangs.new_state(at), stragglers.StragglerState()
    else:
        _, hang, strag = current
    points = []
    for mark in marks:
        if isinstance(mark, CheckpointMark):
            hang = hangs.observe_checkpoint(hang, mark.phase, at)
        elif isinstance(mark, OverflowMark):  # a step skipped for fp16 overflow: training is running
            hang = hangs.observe_progress(hang, None, at, keep=hang_keep)
        else:
            hang = hangs.observe_progress(hang, mark.step, at, keep=hang_keep, printed_s=mark.step_time_s)
            if mark.total and mark.step is not None and mark.step >= mark.total:
                # The training loop is over (step N of N): the final save, evaluation and teardown that
                # follow have no step rhythm, so they get the checkpoint-save allowance, not the step timeout.
                hang = hangs.observe_checkpoint(hang, "started", at)
            if not hangs.in_pause_shadow(hang.pause_steps, mark.step):  # (a rate that says the pause)
                points.append(mark)
    return hang, stragglers.observe_points(strag, points, at, keep=straggler_keep)


def record(attempt: int, hang: hangs.HangState, strag: stragglers.StragglerState,
            div: divergence.DivergenceState | None = None) -> dict:
    record = {"attempt": attempt, "hang": hang.to_dict(), "straggler": strag.to_dict()}
    if div is not None and div != _FRESH:  # most jobs never have anything to keep here
        record["divergence"] = div.to_dict()
    return record
