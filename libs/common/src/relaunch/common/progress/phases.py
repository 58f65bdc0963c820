"""Pauses a healthy training takes, from one log line: checkpoint saves and evaluation (validation) phases.

Both are CheckpointMarks (`kind` "save" or "eval"): the hang watch gives either the same allowance,
learnt per job (relaunch.detector.domain.hangs, docs/user-guide.md "Hangs"). Pure; parse_line tries
these before any preset, since a pause line is unambiguous whatever the preset.

The wording is each framework's own:
- HF Trainer: `***** Running Evaluation *****` (its info log), the evaluation bar (a tqdm bar nested
  below the training bar: tqdm ends each of its redraws with the cursor-up escape `ESC[A`), and the
  `{'eval_loss': ...}` dict printed when the evaluation is over;
- Lightning (and NeMo, which runs on it): the `Validation DataLoader 0` bar (TQDM or Rich; `Validation`
  before its first batch; the sanity check before training is start-up, under the warm-up allowance);
- Megatron-LM (and Megatron-DeepSpeed, DeepSpeed's own training scripts): `Evaluating on N samples` and
  `Evaluating iter i/n` (verbose evaluations only), and `validation loss at iteration N | ...` at the
  end of every evaluation;
- torchtitan: `validate step: N  loss: ...` (MetricsProcessor.log_validation), printed at the end;
- plain scripts: a line that starts with `evaluating`, `running evaluation`, `validating`, ... and
  one that starts with `eval loss`, `validation loss`, `val_loss`, ... at the end.
A phase seen only at its end is learnt all the same (its length is the silence before the line), so its
next occurrence in the job's rhythm is allowed for.

Invariants: bounded time per line (literal needles first, no nested quantifiers); a line that is
nothing of this returns None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..diagnosis import prefixes

CheckpointPhase = Literal["started", "finished"]
PauseKind = Literal["save", "eval"]


@dataclass(frozen=True)
class CheckpointMark:
    """A pause starts or ends: a checkpoint save (`kind` "save") or an evaluation ("eval")."""
    phase: CheckpointPhase
    step: int | None
    rank: int | None
    preset: str
    kind: PauseKind = "save"


_STEP_IN_PATH = re.compile(r"(?:checkpoint-|global_step|step=|iter_)([0-9]+)")
_CHECKPOINTS: tuple[tuple[str, re.Pattern[str], CheckpointPhase, str], ...] = (
    # (lower-case needle, pattern, phase, preset)
    ("saving checkpoint at iteration", re.compile(r"saving checkpoint at iteration\s*([0-9]+)", re.I),
     "started", "megatron"),
    ("saved checkpoint", re.compile(r"successfully saved checkpoint (?:from|at) iteration\s*([0-9]+)", re.I),
     "finished", "megatron"),
    ("checkpoint save for step", re.compile(r"Async checkpoint save for step ([0-9]+)[^\n]{0,600}finalized",
                                            re.I), "finished", "nemo"),
    ("scheduled async checkpoint", re.compile(r"Scheduled async checkpoint save for", re.I), "started", "nemo"),
    ("saving model checkpoint", re.compile(r"Saving model checkpoint(?: to|:)", re.I), "started", "hf_trainer"),
    # HF prints no end-of-save line; rotating old checkpoints happens right after a save completes.
    # The empty group keeps the deleted checkpoint's number from being taken for the saved one.
    ("deleting older checkpoint", re.compile(r"Deleting older checkpoint()", re.I), "finished", "hf_trainer"),
    # "Finished saving the checkpoint" contains "saving the checkpoint": the end is tried first
    ("finished saving the checkpoint", re.compile(r"Finished saving the checkpoint", re.I), "finished",
     "torchtitan"),
    ("saving the checkpoint", re.compile(r"Saving the checkpoint", re.I), "started", "torchtitan"),
    ("only checkpoint", re.compile(r"Saving a (?:full|model only) checkpoint[^\n]{0,200}step ([0-9]+)", re.I),
     "started", "torchtitan"),
    ("saving checkpoint at step", re.compile(r"Saving checkpoint at step ([0-9]+)", re.I), "started", "torchtitan"),
    ("is about to be saved", re.compile(r"Checkpoint (\S{1,200}) is about to be saved"), "started", "deepspeed"),
    ("is ready now", re.compile(r"Checkpoint (\S{1,200}) is ready now"), "finished", "deepspeed"),
    ("zero checkpoint saved", re.compile(r"zero checkpoint saved", re.I), "finished", "deepspeed"),
    ("saving model to", re.compile(r"global step ([0-9]+): [^\n]{0,400}saving model to"), "started", "lightning"),
)

_EVALS: tuple[tuple[str, re.Pattern[str], CheckpointPhase, str], ...] = (
    # (needle, pattern (group 1: the step, where the line names one), phase, preset); case as printed
    ("validation loss at iteration", re.compile(r"validation loss at iteration ([0-9]+)"), "finished", "megatron"),
    ("Evaluating ", re.compile(r"Evaluating (?:on [0-9]+ samples|iter [0-9]+/[0-9]+)()"), "started", "megatron"),
    ("validate step:", re.compile(r"validate step:\s*([0-9]+)\s{1,8}loss:"), "finished", "torchtitan"),
    ("Running Evaluation", re.compile(r"\*+ Running Evaluation \*+()"), "started", "hf_trainer"),
    ("{'eval_loss': ", re.compile(r"\{'eval_loss': ()"), "finished", "hf_trainer"),
    ("DataLoader ", re.compile(r"Validation DataLoader [0-9]+()"), "started", "lightning"),
    ("Validation: ", re.compile(r"Validation: [ 0-9]{0,3}%?\|()"), "started", "lightning"),
)
_PLAIN_START = ("evaluating", "running evaluation", "running validation", "starting evaluation",
                "starting validation", "validating", "evaluation started", "validation started")
_PLAIN_END = ("eval loss", "eval_loss", "evaluation loss", "validation loss", "val loss", "val_loss",
              "evaluation done", "evaluation finished", "validation done", "validation finished")
_NESTED_BAR = "\x1b[A"
"""tqdm's cursor-up, written after every redraw of a bar below the first (tqdm's moveto(-position))."""


def pause(text: str, raw_tail: str, rank: int | None) -> CheckpointMark | None:
    """A save or an evaluation from a cleaned line (`text`); `raw_tail`: the uncleaned frame's last
    characters (where a nested bar's escape is)."""
    return _checkpoint(text, rank) or _evaluation(text, raw_tail, rank)


def _checkpoint(text: str, rank: int | None) -> CheckpointMark | None:
    lower = text.lower()
    if "checkpoint" not in lower and "saving model to" not in lower:
        return None
    for needle, pattern, phase, preset in _CHECKPOINTS:
        if needle in lower:
            m = pattern.search(text)
            if m:
                return CheckpointMark(phase, _step_of(m, text), rank, preset)
    return None


def _evaluation(text: str, raw_tail: str, rank: int | None) -> CheckpointMark | None:
    lower = text.lower()
    seen = "val" in lower  # (eval, val, validation, validate, Evaluating)
    if seen:
        for needle, pattern, phase, preset in _EVALS:
            if needle in text:
                m = pattern.search(text)
                if m:
                    return CheckpointMark(phase, int(m[1]) if m[1] else None, rank, preset, "eval")
    if raw_tail.endswith(_NESTED_BAR) and "%|" in text:
        # HF's evaluation bar: a bar below the training bar, without a description of its own
        return CheckpointMark("started", None, rank, "hf_trainer", "eval")
    if not seen:
        return None
    body = prefixes.strip(text)[0]
    head = text[body:body + 40].lstrip().lower()
    if head.startswith(_PLAIN_END):
        return CheckpointMark("finished", None, rank, "plain", "eval")
    if head.startswith(_PLAIN_START):
        return CheckpointMark("started", None, rank, "plain", "eval")
    return None


def _step_of(m: re.Match[str], text: str) -> int | None:
    if m.re.groups and m[1].isdigit():
        return int(m[1])
    # a tag or path like global_step500 / checkpoint-500 / step=500 still names the step
    found = _STEP_IN_PATH.search(m[1] if m.re.groups else text[m.start():])
    return int(found[1]) if found else None
