"""Text from a job, made safe to show a person: `printable(text)`.

Everything a job controls (its log lines and evidence excerpts, its name, comment, paths, the
reasons and summaries quoted from them) is untrusted. Written raw to a terminal, an escape sequence
in it retitles the window (`ESC]0;...BEL`), clears the screen (`ESC[2J`), moves the cursor to
overwrite what relaunch printed, or, on some terminals, answers back into the shell. So every such
string is passed through `printable` before the CLI prints it (docs/security.md, "Text from jobs").

Invariant: the result holds no control character (C0, DEL, C1), no line or paragraph separator and
no bidirectional override or isolate (they reorder what follows on screen); each is written as a
Python-style escape (`\\x1b`, `\\x07`, `\\r`, `\\n`, `\\t`, `\\u202e`), so a person still sees what
was there. Every other character, printable Unicode included, is kept as it is. Markup (rich's
`[bold]`, HTML) is not this function's business: the caller prints the result as plain text.
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Bidirectional marks, embeddings, overrides and isolates: they change the order text is shown in."""


def _unsafe(ch: str) -> bool:
    return ch in _BIDI or unicodedata.category(ch) in ("Cc", "Zl", "Zp")


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`text` (str() of it; None is "") with every control character written as an escape."""
    if text is None:
        return ""
    text = str(text)
    if text.isprintable():  # the common case, and fast: no control, separator or other unprintable char
        return text
    return "".join(_escaped(ch) if _unsafe(ch) else ch for ch in text)
