"""Divergence in a whole log, as the live detector finds it (`relaunch classify`): every line goes through
parse_line and the divergence rules exactly as the detector's tracker applies them to the lines of its
log batches (relaunch.detector.tracking: one mark per line, checkpoint saves ignored, a point without
loss figures advancing the step only). Pure.

What it costs and when it runs: relaunch.common.progress.watch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import divergence
from .parsing import CheckpointMark, ProgressPoint, parse_line


@dataclass(frozen=True)
class Diverged:
    verdict: divergence.Divergence
    index: int
    """The line (0 = first) whose report reached the verdict."""
    text: str


def divergence_in_lines(lines: Iterable[str], policy: divergence.DivergencePolicy = divergence.DivergencePolicy()
                        ) -> Diverged | None:
    """The first divergence verdict the detector's tracker would reach on these lines, in order."""
    return divergence_in(enumerate(lines), policy)


def divergence_in(numbered: Iterable[tuple[int, str]],
                  policy: divergence.DivergencePolicy = divergence.DivergencePolicy()) -> Diverged | None:
    """divergence_in_lines over (index, line) pairs: the index is the caller's (a line number, or a
    position in a stream), and the verdict names it."""
    state = divergence.DivergenceState()
    for index, line in numbered:
        mark = parse_line(line)
        if mark is None or isinstance(mark, CheckpointMark):
            continue
        if isinstance(mark, ProgressPoint) and mark.health is None:
            state = divergence.observe_step(state, mark.step, policy)
        else:
            state = divergence.observe(state, mark, policy)
        found = divergence.verdict(state, policy)
        if found is not None:
            return Diverged(found, index, line)
    return None
