"""Training progress from one log line: the step, and the throughput or step time where printed.

Pure: a line in, a value out. Presets follow what each framework really prints (Megatron-LM's
`iteration N/ M | ...` line, NeMo's `global_step` / `train_step_timing in s` fields, Lightning's and
HF Trainer's tqdm bars, HF's `{'loss': ...}` dicts, torchtitan's `step: N loss: ... tps: ...`, and
DeepSpeed's `[Rank 0] step=N`, pipeline `steps: N ... samples/sec:` and ThroughputTimer lines).
Checkpoint saves are a second kind of result: the hang detector must not mistake a long save for
a hang.

Invariants:
- bounded time per line, whatever it holds: only the first MAX_LINE characters are looked at, every
  pattern starts with a literal and has no two adjacent quantifiers over overlapping characters (so
  no catastrophic backtracking), and each preset is gated by cheap substring checks first;
- bytes are accepted and decoded with replacement, so binary junk and invalid UTF-8 are harmless;
- throughput is reported in the unit the framework prints (TFLOP/s/GPU, samples/s, tokens/s, it/s):
  only a job's own values are ever compared with each other, never values across presets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

MAX_LINE = 8192
"""Only the first MAX_LINE characters of a line are parsed (after choosing the last tqdm refresh)."""

PRESETS = ("nemo", "megatron", "deepspeed", "torchtitan", "lightning", "hf_trainer")
"""Also the order of auto-detection: the most specific formats first (NeMo 2's line also reads
`iteration 9/99 |`, so NeMo is tried before Megatron-LM)."""

CheckpointPhase = Literal["started", "finished"]


@dataclass(frozen=True)
class ProgressPoint:
    step: int | None
    """The global step (iteration); None where the line shows progress without one (HF loss dicts)."""
    throughput: float | None
    """In the preset's own unit; compare only with the same job's values."""
    step_time_s: float | None
    rank: int | None
    preset: str


@dataclass(frozen=True)
class CheckpointMark:
    phase: CheckpointPhase
    step: int | None
    rank: int | None
    preset: str


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
# Prefixes launchers put before a rank's output: torchrun `[rank3]:` / `[default3]:`, DeepSpeed's
# log_dist `[Rank 3]`, srun --label `3: `. Only the head of the line is searched.
_RANK_PREFIX = re.compile(r"\s*(?:\[(?:rank|default)([0-9]+)\]:|([0-9]+): )")
_RANK_TAG = re.compile(r"\[Rank ([0-9]+)\]")
_RANK_HEAD = 160

# --- checkpoint saves (recognised whatever the preset: a save line is unambiguous) ---------------
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

# --- progress lines ---------------------------------------------------------------------------
_MEGATRON_ITER = re.compile(r"iteration\s*([0-9]+)\s*/\s*[0-9]+\s*\|")
_MEGATRON_MS = re.compile(r"elapsed time per iteration \(ms\):\s*" + _NUM)
_MEGATRON_RATE = (  # first found wins; a job prints the same fields on every line, so its unit is stable
    re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM),
    re.compile(r"samples per second:\s*" + _NUM),
    re.compile(r"tokens per sec(?:ond)?(?: per GPU)?:\s*" + _NUM),
)
_NEMO_STEP = re.compile(r"global_step[=:]\s*" + _NUM)
_NEMO_TIME = re.compile(r"train_step_timing in s[=:]\s*" + _NUM)
_NEMO_RATE = re.compile(r"tflops_per_sec_per_gpu[=:]\s*" + _NUM)
_DS_RANK_STEP = re.compile(r"\[Rank ([0-9]+)\] step=([0-9]+), skipped=")
_DS_TIMER = re.compile(r"global_step=([0-9]+), RunningAvgSamplesPerSec=" + _NUM + r", CurrSamplesPerSec=" + _NUM)
_DS_PIPE = re.compile(r"\bsteps?: *([0-9]+)(?: */ *[0-9]+)? loss: ")
_DS_ITER_TIME = re.compile(r"iter time \(s\):\s*" + _NUM)
_DS_SAMPLES = re.compile(r"samples/sec[=:]\s*" + _NUM)
_TITAN_STEP = re.compile(r"\bstep:\s*([0-9]+)\s{1,8}loss:")
_TITAN_RATE = re.compile(r"\b[tw]ps:\s*([0-9][0-9,]{0,20}(?:\.[0-9]*)?)")
_LIGHTNING_BAR = re.compile(r"Epoch ([0-9]+):[^|]{0,40}\|[^|]{0,200}\|\s*([0-9]+)/([0-9]+|\?)\s*\[([^\]]{0,400})\]")
_DICT_STEP = re.compile(r"['\"](?:trainer/)?(?:global_)?step['\"]\s*:\s*" + _NUM)
_HF_DICT = re.compile(r"\{'loss': " + _NUM)
_HF_BAR = re.compile(r"\s*[0-9]{1,3}%\|[^|]{0,200}\|\s*([0-9]+)/([0-9]+)\s*\[([^\]]{0,400})\]")
_BAR_RATE = re.compile(_NUM + r"(it/s|s/it)")


def parse_line(line: str | bytes, preset: str | None = None) -> ProgressPoint | CheckpointMark | None:
    """Progress or a checkpoint save from one log line; None for every other line.

    `preset` is one of PRESETS, or None to try them all (the result names the one that matched, so
    a caller may pin it for the job's later lines).
    """
    if preset is not None and preset not in _PARSERS:
        raise ValueError(f"unknown progress preset {preset!r} (known: {', '.join(PRESETS)})")
    text = _clean(line)
    if not text:
        return None
    rank = _rank(text)
    mark = _checkpoint(text, rank)
    if mark is not None:
        return mark
    for name in (preset,) if preset else PRESETS:
        point = _PARSERS[name](text, rank)
        if point is not None:
            return point
    return None


def _clean(line: str | bytes) -> str:
    # tqdm redraws with '\r' and no newline: a "line" may hold thousands of refreshes; the last one
    # is the current state. rstrip/rfind are linear and run in C, so this stays bounded.
    if isinstance(line, bytes):
        line = line.rstrip(b"\r\n ")
        cut = line.rfind(b"\r") + 1
        line = line[cut:cut + MAX_LINE * 4].decode("utf-8", errors="replace")
    else:
        line = line.rstrip("\r\n ")
        line = line[line.rfind("\r") + 1:]
    text = line[:MAX_LINE]
    if "\x1b" in text:  # torchtitan colours its metrics
        text = _ANSI.sub("", text)
    return text


def _rank(text: str) -> int | None:
    head = text[:_RANK_HEAD]
    m = _RANK_PREFIX.match(head)
    if m:
        return int(m[1] or m[2])
    m = _RANK_TAG.search(head)
    return int(m[1]) if m else None


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


def _step_of(m: re.Match[str], text: str) -> int | None:
    if m.re.groups and m[1].isdigit():
        return int(m[1])
    # a tag or path like global_step500 / checkpoint-500 / step=500 still names the step
    found = _STEP_IN_PATH.search(m[1] if m.re.groups else text[m.start():])
    return int(found[1]) if found else None


def _megatron(text: str, rank: int | None) -> ProgressPoint | None:
    if "iteration" not in text or "|" not in text:
        return None
    m = _MEGATRON_ITER.search(text)
    if not m:
        return None
    ms = _MEGATRON_MS.search(text, m.end())
    return ProgressPoint(int(m[1]), _first(_MEGATRON_RATE, text, m.end()),
                         float(ms[1]) / 1000.0 if ms else None, rank, "megatron")


def _nemo(text: str, rank: int | None) -> ProgressPoint | None:
    # NeMo 2 prints `Training epoch 0, iteration 9/99 | ... | global_step: 9 | ... | train_step_timing
    # in s: 0.43`; NeMo 1 puts `global_step=99.00, ... train_step_timing in s=3.13` in its tqdm bar.
    if "global_step" not in text or ("train_step_timing" not in text and "reduced_train_loss" not in text):
        return None
    m = _NEMO_STEP.search(text)
    if not m:
        return None
    t = _NEMO_TIME.search(text)
    return ProgressPoint(int(float(m[1])), _first((_NEMO_RATE,), text, 0), float(t[1]) if t else None, rank, "nemo")


def _deepspeed(text: str, rank: int | None) -> ProgressPoint | None:
    if "RunningAvgSamplesPerSec" in text:
        m = _DS_TIMER.search(text)
        if m:  # Curr, not RunningAvg: a running average hides a drop for a long time
            return ProgressPoint(int(m[1]), float(m[3]), None, rank, "deepspeed")
    if "] step=" in text:
        m = _DS_RANK_STEP.search(text)
        if m:
            return ProgressPoint(int(m[2]), None, None, int(m[1]), "deepspeed")
    if "loss: " in text and ("iter time" in text or "samples/sec" in text):
        m = _DS_PIPE.search(text)
        if m:
            t = _DS_ITER_TIME.search(text, m.end())
            return ProgressPoint(int(m[1]), _first((_DS_SAMPLES,), text, m.end()), float(t[1]) if t else None,
                                 rank, "deepspeed")
    return None


def _torchtitan(text: str, rank: int | None) -> ProgressPoint | None:
    if "step:" not in text or "loss:" not in text:
        return None
    if not any(k in text for k in ("tps:", "wps:", "memory:", "mfu:")):
        return None
    m = _TITAN_STEP.search(text)
    if not m:
        return None
    tps = _TITAN_RATE.search(text, m.end())
    return ProgressPoint(int(m[1]), float(tps[1].replace(",", "")) if tps else None, None, rank, "torchtitan")


def _lightning(text: str, rank: int | None) -> ProgressPoint | None:
    if "Epoch " in text and "|" in text:
        m = _LIGHTNING_BAR.search(text)
        if m:
            # Lightning's bar counts batches within the epoch; with a known length the epoch makes the
            # count global, so a new epoch is not mistaken for a restart.
            n = int(m[2])
            step = int(m[1]) * int(m[3]) + n if m[3] != "?" else n
            return _bar_point(step, m[4], rank, "lightning")
    if "step" in text and "{" in text:
        m = _DICT_STEP.search(text)
        if m:
            return ProgressPoint(int(float(m[1])), None, None, rank, "lightning")
    return None


def _hf_trainer(text: str, rank: int | None) -> ProgressPoint | None:
    if "{'loss': " in text:
        if _HF_DICT.search(text) and "'epoch': " in text:
            # printed once per `logging_steps` on the main process: progress, though without a step
            return ProgressPoint(None, None, None, rank, "hf_trainer")
        return None
    if "%|" in text:
        # anchored at the line start: a bar with a description ("Map: 40%|", "Loading checkpoint
        # shards: 50%|") is not the Trainer's
        m = _HF_BAR.match(text, _prefix_end(text))
        if m:
            return _bar_point(int(m[1]), m[3], rank, "hf_trainer")
    return None


def _prefix_end(text: str) -> int:
    m = _RANK_PREFIX.match(text)
    return m.end() if m else 0


def _bar_point(step: int, stats: str, rank: int | None, preset: str) -> ProgressPoint:
    # tqdm switches between "it/s" and "s/it" as the rate crosses 1 it/s; both fields are filled so a
    # job near 1 it/s keeps one consistent unit.
    m = _BAR_RATE.search(stats)
    if not m or float(m[1]) <= 0:
        return ProgressPoint(step, None, None, rank, preset)
    value = float(m[1])
    rate = value if m[2] == "it/s" else 1.0 / value
    return ProgressPoint(step, rate, 1.0 / rate, rank, preset)


def _first(patterns: tuple[re.Pattern[str], ...], text: str, pos: int) -> float | None:
    for pattern in patterns:
        m = pattern.search(text, pos)
        if m:
            return float(m[1])
    return None


_PARSERS = {
    "nemo": _nemo,
    "megatron": _megatron,
    "deepspeed": _deepspeed,
    "torchtitan": _torchtitan,
    "lightning": _lightning,
    "hf_trainer": _hf_trainer,
}
