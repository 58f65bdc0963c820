"""Training progress from one log line: the step, the throughput or step time, and the loss, grad norm
and loss-scale figures where printed (what divergence detection reads).

Pure: a line in, a value out. The detector's live follower and `relaunch progress FILE` both read
frames (a line, or one redraw of a `\r`-redrawn bar: relaunch.common.progress.reading) and give each
to parse_line. Presets follow what each framework really prints (Megatron-LM's
`iteration N/ M | ...` line, NeMo's `global_step` / `train_step_timing in s` fields, Lightning's and
HF Trainer's tqdm bars, HF's `{'loss': ...}` dicts, torchtitan's `step: N loss: ... tps: ...`, and
DeepSpeed's `[Rank 0] step=N`, pipeline `steps: N ... samples/sec:` and ThroughputTimer lines, and
plain `step N/M | loss X` lines that training scripts print themselves). fp16 overflow lines (DeepSpeed's
`OVERFLOW! Rank 0 Skipping step`, apex/HF's `Gradient overflow.  Skipping step`) are OverflowMarks.
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
import math
from dataclasses import dataclass, field, replace

from ..diagnosis import prefixes
from .phases import CheckpointMark, CheckpointPhase, pause  # noqa: F401 - CheckpointPhase re-exported

MAX_LINE = 8192
"""Only the first MAX_LINE characters of a line are parsed (after choosing the last tqdm refresh)."""

PRESETS = ("nemo", "megatron", "deepspeed", "torchtitan", "lightning", "hf_trainer", "plain")
"""Also the order of auto-detection: the most specific formats first (NeMo 2's line also reads
`iteration 9/99 |`, so NeMo is tried before Megatron-LM)."""

@dataclass(frozen=True)
class Health:
    """What a progress line says about the numerics of training (None where it does not say)."""
    loss: float | None = None
    """nan and inf are kept as such: they are what divergence detection looks for."""
    grad_norm: float | None = None
    loss_scale: float | None = None
    skipped: int | None = None
    """Skipped iterations: Megatron's per log interval; DeepSpeed's `skipped=` is a running total
    (`skipped_total`)."""
    skipped_total: int | None = None
    nan_iterations: int | None = None

    def non_finite(self) -> str | None:
        """'loss' or 'grad norm' when that value is NaN or infinite."""
        if self.loss is not None and not math.isfinite(self.loss):
            return "loss"
        if self.grad_norm is not None and not math.isfinite(self.grad_norm):
            return "grad norm"
        if self.nan_iterations:
            return "loss"
        return None


@dataclass(frozen=True)
class ProgressPoint:
    step: int | None
    """The global step (iteration); None where the line shows progress without one (HF loss dicts)."""
    throughput: float | None
    """In the preset's own unit; compare only with the same job's values."""
    step_time_s: float | None
    rank: int | None
    preset: str
    health: Health | None = field(default=None, compare=False)
    """Loss and friends where the line prints them (not part of equality: a point is its progress)."""
    total: int | None = field(default=None, compare=False)
    """The run's last step, where the line prints it as a global count (HF's bar, Megatron's `N/ M`,
    plain `step N/M`; not Lightning's bar, whose total is one epoch's): at step == total the training
    loop is over and what follows (final save, evaluation, teardown) is no step rhythm."""


@dataclass(frozen=True)
class OverflowMark:
    """An fp16 overflow: the step was skipped and the dynamic loss scale lowered (to `new_scale`)."""
    new_scale: float | None
    rank: int | None
    preset: str
    at_minimum: bool = False
    """The scaler says it cannot go lower (DeepSpeed: 'Current loss scale already at minimum')."""


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUM = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
# A value that may be NaN or infinite: Python prints nan / inf, Lightning's bar `nan.0`, HF 5.x quotes it.
_VAL = r"['\"]?((?i:nan|[-+]?inf(?:inity)?)(?:\.0)?(?![A-Za-z])|[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)['\"]?"
# The rank: from the launchers' prefixes (diagnosis.prefixes: srun's `3: `, torchrun's `[rank3]:`), else
# DeepSpeed's log_dist `[Rank 3]`, searched in the head of the line.
_RANK_TAG = re.compile(r"\[Rank ([0-9]+)\]")
_RANK_HEAD = 160

# --- progress lines ---------------------------------------------------------------------------
_MEGATRON_ITER = re.compile(r"iteration\s*([0-9]+)\s*/\s*([0-9]+)\s*\|")
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
# Lightning's Rich bar: `Epoch 0/-2 ━━━━━━━━━━ 40/80 0:00:03 • 0:00:04 12.50it/s train_loss: 4.845`
_LIGHTNING_RICH = re.compile(r"Epoch ([0-9]+)/[-0-9?]{1,12} [━╸╺ ]{1,200} ([0-9]+)/([0-9]+|\?) ([^\n]{0,400})")
_RICH_LOSS = re.compile(r"\b(?:train_loss|loss)(?:_step)?: " + _VAL)
_DICT_STEP = re.compile(r"['\"](?:trainer/)?(?:global_)?step['\"]\s*:\s*" + _NUM)
_HF_DICT = re.compile(r"\{'loss': " + _VAL)
_HF_GRAD = re.compile(r"'grad_norm': " + _VAL)
_MEGATRON_LOSS = re.compile(r"\| lm loss: " + _VAL)
_MEGATRON_GRAD = re.compile(r"\| grad norm: " + _VAL)
_MEGATRON_SCALE = re.compile(r"\| loss scale: " + _VAL)
# Counts as Megatron-LM and DeepSpeed print them (`: {:3d}`, `skipped={}`): no leading zero, so that the scan
# engine finds a non-zero one by literals alone (progress/watch.py)
_MEGATRON_SKIPPED = re.compile(r"number of skipped iterations: {1,3}([1-9][0-9]*|0)(?![0-9])")
_MEGATRON_NAN = re.compile(r"number of nan iterations: {1,3}([1-9][0-9]*|0)(?![0-9])")
_NEMO_LOSS = re.compile(r"reduced_train_loss[=:]\s*" + _VAL)
_DS_SKIPPED = re.compile(r"\] step=[0-9]+, skipped=([1-9][0-9]*|0)(?![0-9])")
_DS_LOSS = re.compile(r"\bloss: " + _VAL)
_TITAN_LOSS = re.compile(r"\bloss:\s*" + _VAL)
_TITAN_GRAD = re.compile(r"\bgrad_norm:\s*" + _VAL)
_BAR_LOSS = re.compile(r"[ ,](?:train_loss|loss|train/loss)(?:_step)?=" + _VAL)
_BAR_GRAD = re.compile(r"[ ,]grad_norm=" + _VAL)
_PLAIN_STEP = re.compile(r"(?i:step)[ :=]\s{0,4}([0-9]+)\s{0,4}/\s{0,4}([0-9]+)\s{0,4}[|,]?\s{0,4}(?i:loss)[ :=]\s{0,4}" + _VAL)
_PLAIN_TIME = re.compile(_NUM + r"\s{0,2}s/(?:step|it)\b")
_PLAIN_RATE = re.compile(_NUM + r"\s{0,2}(?:it|steps|samples|tokens)/s\b")
_OVERFLOWS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    # (needle, pattern with the new scale as group 1 (or none), preset)
    ("Skipping step. Attempted loss scale", re.compile(
        r"OVERFLOW! Rank [0-9]+ Skipping step\. Attempted loss scale: [0-9.e+]+,? (?:reducing to ([0-9.e+]+))?"),
     "deepspeed"),
    ("overflow! Skipping step", re.compile(r"overflow! Skipping step\. Attempted loss scale: [0-9.e+]+, "
                                           r"reducing to ([0-9.e+]+)"), "deepspeed"),
    ("Gradient overflow.", re.compile(r"Gradient overflow\. {1,2}Skipping step, loss scaler [0-9]+ reducing loss "
                                      r"scale to ([0-9.e+]+)"), "hf_trainer"),
)
_AT_MINIMUM = "Current loss scale already at minimum"
_HF_BAR = re.compile(r"\s*[0-9]{1,3}%\|[^|]{0,200}\|\s*([0-9]+)/([0-9]+)\s*\[([^\]]{0,400})\]")
_BAR_RATE = re.compile(_NUM + r"(it/s|s/it)")


Mark = ProgressPoint | CheckpointMark | OverflowMark


def parse_line(line: str | bytes, preset: str | None = None) -> Mark | None:
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
    tail = line[-8:].rstrip("\r\n ") if isinstance(line, str) else line[-8:].rstrip(b"\r\n ").decode("ascii", "replace")
    mark = pause(text, tail, rank)
    if mark is not None:
        return mark
    overflow = _overflow(text, rank)
    if overflow is not None:
        return overflow
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
    rank = prefixes.strip(text)[1]
    if rank is not None:
        return rank
    m = _RANK_TAG.search(text, 0, _RANK_HEAD)
    return int(m[1]) if m else None


def _overflow(text: str, rank: int | None) -> OverflowMark | None:
    if "verflow" not in text and "VERFLOW" not in text:
        return _at_minimum(text, rank)
    for needle, pattern, preset in _OVERFLOWS:
        if needle in text:
            m = pattern.search(text)
            if m:
                return OverflowMark(float(m[1]) if m[1] else None, rank, preset)
    return None


def _at_minimum(text: str, rank: int | None) -> OverflowMark | None:
    if _AT_MINIMUM in text:
        return OverflowMark(None, rank, "deepspeed", at_minimum=True)
    return None


def _value(pattern: re.Pattern[str], text: str, pos: int = 0) -> float | None:
    m = pattern.search(text, pos)
    return _float(m[1]) if m else None


def _float(raw: str) -> float | None:
    if raw[:1].isalpha() or raw[1:2].isalpha():
        raw = raw.lower().removesuffix(".0")
    try:
        value = float(raw)
    except ValueError:
        return None
    return None if math.isinf(value) and raw[-1:].isdigit() else value  # digits beyond a double: no reading


def _int(pattern: re.Pattern[str], text: str, pos: int = 0) -> int | None:
    m = pattern.search(text, pos)
    return int(m[1]) if m else None


def _megatron(text: str, rank: int | None) -> ProgressPoint | None:
    if "iteration" not in text or "|" not in text:
        return None
    m = _MEGATRON_ITER.search(text)
    if not m:
        return None
    ms = _MEGATRON_MS.search(text, m.end())
    pos = m.end()
    health = Health(loss=_value(_MEGATRON_LOSS, text, pos), grad_norm=_value(_MEGATRON_GRAD, text, pos),
                    loss_scale=_value(_MEGATRON_SCALE, text, pos), skipped=_int(_MEGATRON_SKIPPED, text, pos),
                    nan_iterations=_int(_MEGATRON_NAN, text, pos))
    return ProgressPoint(int(m[1]), _first(_MEGATRON_RATE, text, m.end()),
                         float(ms[1]) / 1000.0 if ms else None, rank, "megatron", health, int(m[2]))


def _nemo(text: str, rank: int | None) -> ProgressPoint | None:
    # NeMo 2 prints `Training epoch 0, iteration 9/99 | ... | global_step: 9 | ... | train_step_timing
    # in s: 0.43`; NeMo 1 puts `global_step=99.00, ... train_step_timing in s=3.13` in its tqdm bar.
    if "global_step" not in text or ("train_step_timing" not in text and "reduced_train_loss" not in text):
        return None
    m = _NEMO_STEP.search(text)
    if not m:
        return None
    t = _NEMO_TIME.search(text)
    return ProgressPoint(int(float(m[1])), _first((_NEMO_RATE,), text, 0), float(t[1]) if t else None, rank, "nemo",
                         Health(loss=_value(_NEMO_LOSS, text)))


def _deepspeed(text: str, rank: int | None) -> ProgressPoint | None:
    if "RunningAvgSamplesPerSec" in text:
        m = _DS_TIMER.search(text)
        if m:  # Curr, not RunningAvg: a running average hides a drop for a long time
            return ProgressPoint(int(m[1]), float(m[3]), None, rank, "deepspeed")
    if "] step=" in text:
        m = _DS_RANK_STEP.search(text)
        if m:
            return ProgressPoint(int(m[2]), None, None, int(m[1]), "deepspeed",
                                 Health(skipped_total=_int(_DS_SKIPPED, text)))
    if "loss: " in text and ("iter time" in text or "samples/sec" in text):
        m = _DS_PIPE.search(text)
        if m:
            t = _DS_ITER_TIME.search(text, m.end())
            return ProgressPoint(int(m[1]), _first((_DS_SAMPLES,), text, m.end()), float(t[1]) if t else None,
                                 rank, "deepspeed", Health(loss=_value(_DS_LOSS, text, m.start())))
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
    return ProgressPoint(int(m[1]), float(tps[1].replace(",", "")) if tps else None, None, rank, "torchtitan",
                         Health(loss=_value(_TITAN_LOSS, text, m.start()), grad_norm=_value(_TITAN_GRAD, text, m.end())))


def _lightning(text: str, rank: int | None) -> ProgressPoint | None:
    if "Epoch " in text and "|" in text:
        m = _LIGHTNING_BAR.search(text)
        if m:
            # Lightning's bar counts batches within the epoch; with a known length the epoch makes the
            # count global, so a new epoch is not mistaken for a restart.
            n = int(m[2])
            step = int(m[1]) * int(m[3]) + n if m[3] != "?" else n
            return _bar_point(step, m[4], rank, "lightning",
                              Health(loss=_value(_BAR_LOSS, m[4]), grad_norm=_value(_BAR_GRAD, m[4])))
    if "Epoch " in text and "━" in text:
        m = _LIGHTNING_RICH.search(text)
        if m:
            n = int(m[2])
            step = int(m[1]) * int(m[3]) + n if m[3] != "?" else n
            return _bar_point(step, m[4], rank, "lightning", Health(loss=_value(_RICH_LOSS, m[4])))
    if "step" in text and "{" in text:
        m = _DICT_STEP.search(text)
        if m:
            return ProgressPoint(int(float(m[1])), None, None, rank, "lightning")
    return None


def _plain(text: str, rank: int | None) -> ProgressPoint | None:
    # What training scripts print themselves: `step 29/80 | loss 6.23 | 0.32 s/step` (also `Step: 29/80,
    # loss=...`). Both the total and a loss are required, so an unrelated "step 3/5" is not progress.
    lower = text.lower()
    if "step" not in lower or "loss" not in lower or "/" not in text:
        return None
    m = _PLAIN_STEP.search(text)
    if not m:
        return None
    loss = _float(m[3])
    t = _PLAIN_TIME.search(text, m.end())
    if t and float(t[1]) > 0:
        return ProgressPoint(int(m[1]), 1.0 / float(t[1]), float(t[1]), rank, "plain", Health(loss=loss), int(m[2]))
    return ProgressPoint(int(m[1]), _first((_PLAIN_RATE,), text, m.end()), None, rank, "plain", Health(loss=loss),
                         int(m[2]))


def _hf_trainer(text: str, rank: int | None) -> ProgressPoint | None:
    if "{'loss': " in text:
        # printed once per `logging_steps` on the main process: progress, though without a step.
        # transformers 4.x prints the values bare, 5.x as quoted strings ('loss': '6.706').
        if "'epoch': " in text and (m := _HF_DICT.search(text)):
            return ProgressPoint(None, None, None, rank, "hf_trainer",
                                 Health(loss=_value(_HF_DICT, text), grad_norm=_value(_HF_GRAD, text, m.end())))
        return None
    if "%|" in text:
        # anchored at the line start: a bar with a description ("Map: 40%|", "Loading checkpoint
        # shards: 50%|") is not the Trainer's
        m = _HF_BAR.match(text, prefixes.strip(text)[0])
        if m:
            return replace(_bar_point(int(m[1]), m[3], rank, "hf_trainer"), total=int(m[2]))
    return None


def _bar_point(step: int, stats: str, rank: int | None, preset: str, health: Health | None = None) -> ProgressPoint:
    # tqdm switches between "it/s" and "s/it" as the rate crosses 1 it/s; both fields are filled so a
    # job near 1 it/s keeps one consistent unit.
    m = _BAR_RATE.search(stats)
    if not m or float(m[1]) <= 0:
        return ProgressPoint(step, None, None, rank, preset, health)
    value = float(m[1])
    rate = value if m[2] == "it/s" else 1.0 / value
    return ProgressPoint(step, rate, 1.0 / rate, rank, preset, health)


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
    "plain": _plain,
}
