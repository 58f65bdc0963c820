"""Byte-level supersets of the catalogue's patterns, for a multi-pattern engine that scans raw bytes
(Hyperscan, hyperscan_engine.py). Pure.

`superset_source(pattern)` writes a regular expression (PCRE syntax, as Hyperscan reads it, to be
compiled with its MULTILINE flag and no others) that matches the UTF-8 bytes of every line the Python
pattern matches after decoding. It may match more (the exact Python match decides those lines): it
is a prefilter, so being a superset is the only invariant, and selectivity only a matter of speed.

Why a translation and not the pattern itself: Python matches decoded text with Unicode semantics
(`\\w`, `\\d`, `\\s`, `.` and negated classes match non-ASCII characters, bounded repeats count
characters), while the engine scans bytes. The correspondence that makes a byte superset possible:
decoding with replacement maps every ASCII byte to itself, and every non-ASCII character (U+FFFD for
invalid bytes included) comes from 1 to 4 bytes >= 0x80. So an item that can match a non-ASCII
character becomes a byte class of its ASCII characters and every byte >= 0x80, allowed up to four
times as many repeats (`.{0,40}` becomes `[^\\n]{0,160}`); an ASCII item stays exact.
Case-insensitivity is spelled out as byte classes ([Kk]); the only non-ASCII characters that Python
folds to ASCII letters are FOLDS_TO_ASCII, and lines holding one go to the exact match through
FOLDS_TO_ASCII_SOURCE instead. Assertions (`\\b`, `^`, `$`, lookarounds) are dropped: every match of
the pattern still matches without them, `^` because a line is also matched from the end of each prefix
before it (prefixes.py), and `$` would be wrong where a long line is cut at MAX_LINE.

Invariant: for every line L (bytes, no newline), every catalogue pattern P and every suffix S of
T = L[:MAX_LINE_BYTES].decode("utf-8", "replace")[:MAX_LINE], P.search(S) implies the superset matches L.
"""

from __future__ import annotations

import re

try:
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # pragma: no cover - a Python that moved the parser: no engine, the Python path
    _p = _c = None

FOLDS_TO_ASCII = "\u0130\u0131\u017f\u212a"
"""İ ı ſ K: the only non-ASCII characters that re.IGNORECASE equates with ASCII letters (i, s, k);
a unit test checks the whole of Unicode."""
FOLDS_TO_ASCII_SOURCE = "|".join("".join(f"\\x{b:02x}" for b in ch.encode()) for ch in FOLDS_TO_ASCII).encode()

_LF = ord("\n")
_CATEGORIES = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
               "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_CHARS = {"LITERAL", "NOT_LITERAL", "ANY", "IN"}
_UTF8_MAX = 4
"""Bytes per character at most (a U+FFFD that replaced invalid bytes stands for at most 3)."""
_MAX_BOUND = 4000
"""Bounded repeats above this are left unbounded: a superset, and engines refuse huge bounds."""


class Untranslatable(ValueError):
    """A construct this module does not know: the caller falls back to the pure-Python scanner."""


def superset_sources(patterns: list[re.Pattern[str]]) -> list[bytes]:
    """The supersets of all these patterns, without repeats or never-matching ones, and the source that
    picks lines holding a FOLDS_TO_ASCII character. Raises Untranslatable."""
    sources = dict.fromkeys(superset_source(pattern) for pattern in patterns)
    return [source for source in sources if source is not None] + [FOLDS_TO_ASCII_SOURCE]


def superset_source(pattern: re.Pattern[str]) -> bytes | None:
    """The byte-level superset of `pattern`, or None when no line can match it (e.g. it needs a newline).
    Raises Untranslatable for constructs it does not know (a newer Python's parse tree)."""
    if _p is None or isinstance(pattern.pattern, bytes):
        raise Untranslatable("no parse tree for this pattern")
    try:
        tree = _p.parse(pattern.pattern, pattern.flags)
    except Exception as exc:  # noqa: BLE001 - it compiled once already; any failure here is ours
        raise Untranslatable(str(exc)) from exc
    items = _trim_tail(list(tree))
    source = _sequence(items, tree.state.flags)
    if source is None:
        return None
    if re.compile(source, re.MULTILINE).search(""):
        # Only assertions were left (a pattern like `(?=abc)`): every line would be a candidate, which
        # an engine reporting match ends cannot say.
        raise Untranslatable(f"nothing but assertions in {pattern.pattern[:80]!r}")
    return source.encode("ascii")


def _sequence(items, flags: int) -> str | None:
    parts = []
    for op, av in items:
        part = _item(str(op), av, flags)
        if part is None:
            return None  # an item that matches nothing: the sequence matches nothing
        parts.append(part)
    return "".join(parts)


def _item(kind: str, av, flags: int) -> str | None:
    if kind in _CHARS:
        return _char(kind, av, flags, 1, 1)
    if kind in _REPEATS:
        low, high, body = av
        if len(body) == 1 and str(body[0][0]) in _CHARS:
            return _char(str(body[0][0]), body[0][1], flags, low, high)
        inner = _sequence(list(body), flags)
        if inner is None:
            return "" if low == 0 else None
        return f"(?:{inner}){_bounds(low, high)}"
    if kind == "SUBPATTERN":
        _, add, delete, body = av
        return _group(_sequence(list(body), (flags | add) & ~delete))
    if kind == "ATOMIC_GROUP":
        return _group(_sequence(list(av), flags))
    if kind == "BRANCH":
        alternatives = [s for s in (_sequence(list(alt), flags) for alt in av[1]) if s is not None]
        return "(?:" + "|".join(alternatives) + ")" if alternatives else None
    if kind == "AT":
        # Every anchor is dropped, which only widens the match. A line start too: the scanner also
        # matches a line from the end of each prefix a launcher or logger put before it, and from each
        # record joined on the line (prefixes.py), so `^` may match in the middle of the line.
        return ""
    if kind in ("ASSERT", "ASSERT_NOT"):
        return ""
    if kind == "GROUPREF":
        return r"[^\n]*"  # any text the group could have matched
    if kind == "GROUPREF_EXISTS":
        _, yes, no = av
        branches = [s for s in (_sequence(list(yes), flags), _sequence(list(no or []), flags)) if s is not None]
        return "(?:" + "|".join(branches) + ")" if branches else None
    raise Untranslatable(f"unknown construct {kind}")


def _group(inner: str | None) -> str | None:
    return None if inner is None else f"(?:{inner})"


def _char(kind: str, av, flags: int, low: int, high: int) -> str | None:
    """One character of text, repeated low..high times: its ASCII bytes exactly; when it can be a
    non-ASCII character, high bytes too, and each character may then take up to _UTF8_MAX bytes.
    (A class of single bytes with wider bounds, not an alternation per character: Hyperscan builds
    the former an order of magnitude faster and scans it twice as fast.)"""
    if kind == "LITERAL" and av >= 0x80 and av != 0xFFFD and not flags & re.IGNORECASE:
        encoded = "".join(f"\\x{b:02x}" for b in chr(av).encode())  # valid text decodes from these bytes
        return encoded if (low, high) == (1, 1) else f"(?:{encoded}){_bounds(low, high)}"
    source, wide = _class_source(kind, av)
    # Python itself says which ASCII characters the item matches, under the flags in force.
    probe = re.compile(source, flags & (re.IGNORECASE | re.ASCII))
    values = [b for b in range(128) if b != _LF and probe.fullmatch(chr(b))]
    if wide:
        values += range(0x80, 0x100)
        high = high if high == _c.MAXREPEAT else high * _UTF8_MAX
    if not values:
        return None if low else ""
    return _byte_class(values) + _bounds(low, high)


def _bounds(low: int, high: int) -> str:
    if high == _c.MAXREPEAT or high > _MAX_BOUND:
        return "*" if low == 0 else "+" if low == 1 else f"{{{low},}}"
    if low == high:
        return "" if low == 1 else f"{{{low}}}"
    return "?" if (low, high) == (0, 1) else f"{{{low},{high}}}"


def _class_source(kind: str, av) -> tuple[str, bool]:
    """The item as a one-character Python class, and whether it may match a non-ASCII character other
    than FOLDS_TO_ASCII (those lines reach the exact match another way)."""
    if kind == "ANY":
        return r"[^\n]", True
    if kind == "LITERAL":
        return "[" + _escaped(av) + "]", av >= 0x80
    if kind == "NOT_LITERAL":
        return "[^" + _escaped(av) + "]", True
    members, wide = [], False
    for op, value in av:
        name = str(op)
        if name == "NEGATE":
            members.insert(0, "^")
            wide = True
        elif name == "LITERAL":
            members.append(_escaped(value))
            wide = wide or value >= 0x80
        elif name == "RANGE":
            members.append(_escaped(value[0]) + "-" + _escaped(value[1]))
            wide = wide or value[1] >= 0x80
        elif name == "CATEGORY":
            members.append(_CATEGORIES[str(value)])
            wide = True
        else:
            raise Untranslatable(f"unknown class member {name}")
    return "[" + "".join(members) + "]", wide


def _escaped(code: int) -> str:
    return f"\\U{code:08x}"


def _byte_class(values: list[int]) -> str:
    """`[\\x30-\\x39\\x5f]` for sorted byte values, as ranges of consecutive values."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    body = "".join(f"\\x{a:02x}" if a == b else f"\\x{a:02x}-\\x{b:02x}" for a, b in runs)
    return body if len(values) == 1 else f"[{body}]"


def _min_width(items) -> int:
    total = 0
    for op, av in items:
        kind = str(op)
        if kind in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            total += 1
        elif kind in _REPEATS:
            total += av[0] * _min_width(av[2])
        elif kind == "SUBPATTERN":
            total += _min_width(av[3])
        elif kind == "ATOMIC_GROUP":
            total += _min_width(av)
        elif kind == "BRANCH":
            total += min(_min_width(alt) for alt in av[1])
    return total


def _trim_tail(items) -> list:
    """Drop what may follow the part every match must contain: a line matching `A B?` contains a match
    of `A`. Only existence per line matters, and the engine works less (and reports fewer ends)."""
    items = list(items)
    while items:
        op, av = items[-1]
        kind = str(op)
        if kind in _REPEATS and av[0] >= 1 and av[1] != av[0]:
            items[-1] = (op, (av[0], av[0], av[2]))
            return items
        if _min_width([items[-1]]) == 0:
            items.pop()
            continue
        return items
    return items
