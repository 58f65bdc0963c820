"""Which lines of a log can start a divergence (relaunch.common.progress.replay): what `relaunch classify`
looks for while it scans, so that it replays the progress lines only for a log that holds one. Pure, and
light to import (no parser): the command's start-up is benchmarked (bench/scan_speed.py).

Speed: parsing every line in Python costs about 8 us a line, a hundred times what the scan engine
spends on it. WATCH names the lines without which no divergence verdict can be reached, and is cheap
to look for with the scan engine (scan_engines adds WATCH_SOURCES to the engine's patterns):
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

MAX_LINE = 8192
"""parsing.MAX_LINE: the characters of a line the parsers read."""

_KEY = r"""(?i:loss|grad[ _]norm)(?:_step)?['"]?[ :=]\s*['"]?"""
WATCH = re.compile("|".join((
    _KEY + r"(?i:nan|[-+]?inf)",  # a value as parsing's _VAL reads it: right after its key
    r"verflow|VERFLOW|Current loss scale already at minimum",
    r"(?:skipped|nan) iterations: {1,3}[1-9]",  # as parsing.py reads the counts: no leading zero
    r"skipped=[1-9]",
)))
"""Lines that may move the divergence rules off a steady run (module docstring); searched in a line's
first parsing.MAX_LINE characters, as the parsers read them. Every preset prints a loss or grad norm
right after a key that ends in `loss`, `loss_step`, `grad_norm` or `grad norm` and a `:`, `=` or space
(parsing.py), and only as nan or inf (a number in digits too large for a double is no reading); a
non-finite loss scale alone reaches no verdict."""
_WS = rb"[\t\x0b\x0c\r \x1c-\x1f\x80-\xff]"
_BYTE_KEY = rb"(?:[Ll][Oo][Ss][Ss]|[Gg][Rr][Aa][Dd][ _][Nn][Oo][Rr][Mm])(?:_step)?['\"]?[ :=]" + _WS + rb"*['\"]?"
WATCH_SOURCES = [
    _BYTE_KEY + rb"(?:[Nn][Aa][Nn]|[-+]?[Ii][Nn][Ff])",
    rb"verflow|VERFLOW|Current loss scale already at minimum",
    # Literals: an engine finds them at the cost of one; the regular expressions above cost it a check
    # at each `iterations:` of every Megatron line.
    *(b"%s iterations:%s%d" % (what, b" " * spaces, digit)
      for what in (b"skipped", b"nan") for spaces in (1, 2, 3) for digit in range(1, 10)),
    *(b"skipped=%d" % digit for digit in range(1, 10)),
]
"""WATCH for the scan engine (Hyperscan's syntax, multi-line): a byte superset of it (non-ASCII
whitespace is any byte >= 0x80; the letters Python folds to ASCII reach WATCH through the engine's
FOLDS_TO_ASCII pattern)."""


_TAIL = r"""(?:_step)?['"]?[ :=]\s*['"]?(?:nan|[-+]?inf)"""
_LOWERED_VALUES = (re.compile("loss" + _TAIL), re.compile("grad[ _]norm" + _TAIL))
_ITERATIONS = re.compile(r" iterations: {1,3}[1-9]")
_SKIPPED_TOTAL = re.compile(r"skipped=[1-9]")
_FOLDS = re.compile("[\u0130\u0131\u017f\u212a]")
"""Letters that re.IGNORECASE equates with ASCII ones but lower() does not map to them."""


def watched(text: str) -> bool:
    """Whether `text` (a line, or a block of lines) holds a WATCH line. A block is searched the fast way:
    literal tests first, then patterns that start with a literal over the lower-cased text (the same
    lines as WATCH, which `re` would search at every position of a megabyte)."""
    if len(text) <= MAX_LINE:
        return WATCH.search(text) is not None
    if "verflow" in text or "VERFLOW" in text or "Current loss scale already at minimum" in text:
        return True
    if "skipped=" in text and _SKIPPED_TOTAL.search(text):
        return True
    for hit in _ITERATIONS.finditer(text):
        if text.endswith("skipped", 0, hit.start()) or text.endswith("nan", 0, hit.start()):
            return True
    if _FOLDS.search(text):
        return WATCH.search(text) is not None
    lowered = text.lower()
    return any(pattern.search(lowered) for pattern in _LOWERED_VALUES)
