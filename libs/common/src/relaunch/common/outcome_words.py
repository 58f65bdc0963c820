"""A job's outcome in one sentence a researcher understands at a glance (issue 40, item 4):
"recovered after segfault, 1 restart; running", "stopped: ModuleNotFoundError in train.py",
"running", "completed". `relaunch jobs` prints it and the API serves it (`outcome` on each job), so
the CLI and the dashboard say the same words; this module is the one place they are made.

Inputs are ledger rows as the API returns them (plain mappings): the job row (`state`, `verdict`,
`verdict_reason`, `restarts`, `mode`, `mode_override`) and the job's anomalies, oldest first (`attempt`,
`kind`, `category`, `summary`, `evidence`: lines with `text`). Each attempt's failure is its first
anomaly: the detector reports the initiating error first, and a cascade never overrides it.

Pure: no I/O. Evidence lines are the job's own text; only an exception's name and a file's base name
are taken from them (bounded, word characters only), never a whole line, so the sentence stays short
and a log cannot write the verdict. The caller escapes the result before printing it (display.printable).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

_STATES = {
    "RUNNING": "running", "PENDING": "waiting in the queue", "COMPLETED": "completed", "COMPLETING": "completing",
    "FAILED": "failed", "CANCELLED": "cancelled", "TIMEOUT": "stopped at its time limit",
    "NODE_FAIL": "failed with its node", "PREEMPTED": "preempted", "OUT_OF_MEMORY": "ran out of memory",
    "REQUEUED": "requeued", "REQUEUE_HOLD": "requeued (held)", "REQUEUE_FED": "requeued",
    "SUSPENDED": "suspended", "BOOT_FAIL": "failed to boot its nodes", "DEADLINE": "missed its deadline",
}
_WORDS = {"nccl": "NCCL", "cuda": "CUDA", "gpu": "GPU", "xid": "XID", "oom": "out of memory", "nan": "NaN",
          "tpu": "TPU", "ecc": "ECC", "pcie": "PCIe", "nvlink": "NVLink", "xla": "XLA", "shm": "shared memory",
          "slurm": "Slurm"}
_CATEGORIES = {"hang": "a hang (no progress)", "nccl_timeout_hang": "an NCCL timeout (hang)",
               "slurm_time_limit": "the time limit", "slurm_preempted": "a preemption",
               "slurm_cancelled": "a cancel", "slurm_node_failure": "a node failure", "node_lost": "a lost node",
               "divergence": "divergence", "straggler": "a slow node (straggler)"}
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]{0,60}(?:Error|Exception|Interrupt|Exit))\b")
_FILE = re.compile(r"""File "(?:[^"]*/)?([A-Za-z0-9_.-]{1,60}\.py)\"""")
_NAMED_BY_EXCEPTION = frozenset({"user_code_error", "runtime_error", "environment_error", ""})
"""Categories said by the exception that ended the program; the others (an NCCL error raised as a
RuntimeError, a GPU lost) say more in their own words."""
_LINES_READ = 20
_WHY_STOPPED = ((re.compile(r"^(max_attempts=\d+) reached"), r"\1 reached"),
                (re.compile(r"^attempt \d+ reached step \d+, no further"), "no progress since the last restart"),
                (re.compile(r"^\w+ is an? (\w+) fault and policy"), r"no \1 restarts left"))
"""The decider's words for why it stopped (relaunch.decider.domain.policy), said short."""
"""Evidence lines looked at per anomaly: an exception and its file are near the top."""


def category_words(category: str) -> str:
    """A signature category in words: "cuda_oom" -> "CUDA out of memory"."""
    if category in _CATEGORIES:
        return _CATEGORIES[category]
    return " ".join(_WORDS.get(part, part) for part in category.split("_") if part) or "an unknown failure"


def cause_words(anomaly: Mapping[str, Any]) -> str:
    """What failed: the exception and its file when the evidence names them ("ModuleNotFoundError in
    train.py"), else the category in words ("segfault")."""
    category = str(anomaly.get("category") or "")
    if category not in _NAMED_BY_EXCEPTION:
        return category_words(category)
    texts = [str(line.get("text", "")) if isinstance(line, Mapping) else str(line)
             for line in (anomaly.get("evidence") or [])[:_LINES_READ]]
    texts.append(str(anomaly.get("summary") or "")[:500])
    exception = next((m.group(1) for t in texts if (m := _EXCEPTION.search(t[:500]))), None)
    if exception is None:
        return category_words(category)
    files = [m.group(1) for t in texts for m in _FILE.finditer(t[:500])]
    return f"{exception} in {files[-1]}" if files else exception


def _first_per_attempt(anomalies: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    seen: dict[Any, Mapping[str, Any]] = {}
    for anomaly in anomalies:
        if anomaly.get("kind") != "straggler":  # a straggler is a slow run, not a failure
            seen.setdefault(anomaly.get("attempt"), anomaly)
    return list(seen.values())


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _joined(causes: list[str]) -> str:
    distinct = list(dict.fromkeys(causes))
    if len(distinct) > 2:
        return f"{distinct[0]}, {distinct[1]} and {len(distinct) - 2} more"
    return " and ".join(distinct)


def outcome(job: Mapping[str, Any], anomalies: Sequence[Mapping[str, Any]] = ()) -> str:
    """The job's outcome in one sentence (lower case, no full stop)."""
    state = str(job.get("state") or "").upper()
    verdict = str(job.get("verdict") or "")
    restarts = int(job.get("restarts") or 0)
    causes = [cause_words(a) for a in _first_per_attempt(anomalies)]
    last = causes[-1] if causes else ""
    after = f" after {_count(restarts, 'restart')}" if restarts else ""
    state_words = _STATES.get(state, state.lower() or "not seen by Slurm yet")
    if verdict == "stopped":
        if str(job.get("verdict_reason") or "").startswith("cancelled by relaunch"):
            sentence = f"cancelled by relaunch: {last or 'it could not continue'}{after}"
        elif last == _CATEGORIES["slurm_cancelled"]:
            sentence = f"cancelled by its user{after}"
        else:
            reason = str(job.get("verdict_reason") or "")[:200]
            why = next((m.expand(words) for pattern, words in _WHY_STOPPED if (m := pattern.search(reason))), "")
            sentence = f"stopped: {last or state_words}{after}" + (f" ({why})" if why else "")
    elif verdict == "observing":
        sentence = f"not restarted (observe-only): {last or state_words}"
    elif verdict == "recovering":
        sentence = f"recovering from {last or 'a failure'}" + (f", {_count(restarts, 'restart')} so far"
                                                              if restarts else "")
    elif restarts:
        recovered = f"recovered after {_joined(causes)}" if causes else "restarted"
        sentence = f"{recovered}, {_count(restarts, 'restart')}; {state_words}"
    elif state in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "BOOT_FAIL") and last:
        sentence = f"{state_words}: {last}"
    else:
        sentence = state_words
    observed = job.get("mode_override") == "observe" or job.get("mode") == "observe"
    return sentence + (" (observe-only)" if observed and verdict != "observing" else "")
