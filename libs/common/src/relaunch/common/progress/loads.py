"""The checkpoint an attempt loaded, from one log line (docs/goodput.md, "The facts"). Pure.

Each framework's own wording when it resumes:
- Megatron-LM: `successfully loaded checkpoint from <dir> [ t 1/1, p 1/1 ] at iteration 1000`;
- HF Trainer: `  Continuing training from global step 500` (after `Continuing training from checkpoint`);
- Lightning (and NeMo on it): `Restoring states from the checkpoint path at <dir>/epoch=0-step=500.ckpt`;
- torchtitan: `Loading the checkpoint from ./outputs/checkpoint/step-500.` (also at `step 500`);
- DeepSpeed: `Loading checkpoint: <dir>/global_step500` and the like (the tag names the step).
A line that names no step (a path without one) is a load all the same: `Load.step` None. What is loaded
must be a path (`Loading checkpoint shards: 100%` is a pretrained model's weights, not a resume).

Invariants: bounded time per line (a literal gate first, patterns without nested quantifiers, the first
MAX_LINE characters only); every other line returns None; evaluation, saving and training lines never
read as loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE = 4096
_GATE = ("oaded checkpoint", "ontinuing training from global step", "estoring states from the checkpoint",
         "oading the checkpoint", "oading checkpoint")
_PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    # (needle, pattern (group 1: the step where the line names it), preset)
    ("oaded checkpoint", re.compile(r"successfully loaded checkpoint from [^\n]{0,600}? at iteration\s*([0-9]+)",
                                    re.I), "megatron"),
    ("ontinuing training from global step", re.compile(r"Continuing training from global step ([0-9]+)"),
     "hf_trainer"),
    ("estoring states from the checkpoint", re.compile(r"Restoring states from the checkpoint(?: path)? at (\S{1,600})"),
     "lightning"),
    ("oading the checkpoint", re.compile(r"Loading the checkpoint (?:from|at) (\S{1,600})"), "torchtitan"),
    ("oading checkpoint", re.compile(r"[Ll]oading checkpoint:? (?:from )?(\S{1,600})"), "deepspeed"),
)
_STEP_IN_PATH = re.compile(r"(?:global_step|step[=_-]|iter_|checkpoint-|step )0*([0-9]{1,12})")


@dataclass(frozen=True)
class Load:
    step: int | None
    preset: str


def loaded(line: str | bytes) -> Load | None:
    """The checkpoint load one line reports, or None."""
    if isinstance(line, bytes):
        line = line[:MAX_LINE * 4].decode("utf-8", errors="replace")
    text = line[:MAX_LINE]
    # Every log line not progress comes here: three scans let nearly all of them go (four of the five
    # wordings hold "oad"), and only then is each wording looked for.
    if "oad" not in text and "ontinuing" not in text and "estoring" not in text:
        return None
    if not any(gate in text for gate in _GATE):
        return None
    for needle, pattern, preset in _PATTERNS:
        if needle not in text:
            continue
        m = pattern.search(text)
        if m is None:
            continue
        found = m[1]
        if found.isdigit():
            return Load(int(found), preset)
        if "/" not in found:  # a path names a checkpoint; "Loading checkpoint shards: 100%" is a model's weights
            continue
        step = _STEP_IN_PATH.search(found)
        return Load(int(step[1]) if step else None, preset)
    return None
