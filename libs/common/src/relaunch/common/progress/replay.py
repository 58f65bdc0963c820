"""Divergence in a whole log, as the live detector finds it (`relaunch classify`): every line goes through
parse_line and the divergence rules exactly as the detector's tracker applies them to the lines of its
log batches (relaunch.detector.tracking: one mark per line, checkpoint saves ignored, a point without
loss figures advancing the step only). Pure.

Speed: parsing every line in Python costs about 8 us a line, a hundred times what the scan engine
spends on it. WATCH names the lines without which no divergence verdict can be reached, and is cheap
to look for with the scan engine (offline.py adds it to the engine's patterns):
- a NaN or infinite loss or grad norm: each preset reads them after `loss`, `grad_norm` or `grad norm`
  (parsing.py's _VAL), and Megatron counts `nan iterations`;
- a skipped step: an fp16 overflow line (`OVERFLOW!`, `Gradient overflow`), DeepSpeed's `Current loss
  scale already at minimum`, a non-zero count of Megatron's `skipped iterations` or DeepSpeed's
  running `skipped=` total;
- a loss scale collapse needs an overflow line or a skip in the same report.
Without any of them the divergence state never leaves "steady" (no bad run, no skip, no collapse), so
a log holding no WATCH line needs no replay at all; one that holds one is replayed from its start,
exactly (tests/unit/test_divergence_replay.py checks both on random sequences of real lines).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from . import divergence
from .parsing import CheckpointMark, ProgressPoint, parse_line

_VALUE_KEY = r"""(?i:loss|grad[ _]norm)(?:_step)?['"]?[ :=]\s*['"]?"""
WATCH = re.compile("|".join((
    _VALUE_KEY + r"(?i:nan|[-+]?inf)",
    _VALUE_KEY + r"[-+]?[0-9.]*[eE]\+?[0-9]{3}",  # a value beyond a double's range reads as inf
    r"verflow|VERFLOW|Current loss scale already at minimum",
    r"(?:skipped|nan) iterations:\s*0*[1-9]",
    r"skipped=0*[1-9]",
)))
"""Lines that may move the divergence rules off a steady run (module docstring); searched in a line's
first parsing.MAX_LINE characters, as the parsers read them."""


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
