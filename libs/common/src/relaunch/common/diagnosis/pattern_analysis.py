"""What a regular expression needs and what it risks, read from its parse tree. Pure.

- `required_literals(source)`: a set of literal strings such that every match of the pattern
  contains at least one of them (compared case-insensitively). The scanner's prefilter skips a line
  that contains none, so this set must be exact, never a guess: it is derived from the parse tree
  and never written by hand, so an operator's pattern cannot silently lose matches to the prefilter.
- `backtracking_risk(source)`: why the pattern could backtrack catastrophically (a quantified group
  that contains another variable quantifier or an alternation, as in `(a+)+` or `(a|ab)*`), else None.

Both read `re._parser`, the parser `re` itself uses (this name since Python 3.11). If a future
Python moved it, `required_literals` would return None (no prefilter for that pattern: slower,
still correct) and `backtracking_risk` None (the timing tests still guard the built-in catalogue).
"""

from __future__ import annotations

import functools

try:
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # pragma: no cover - a Python that moved the parser
    _p = _c = None

MIN_KEYWORD = 3
"""Shorter literals are too common to skip any line; such a pattern is tried on every line."""
_MAX_ALTERNATIVES = 64
_MAX_LITERAL = 120

_ZERO_WIDTH = {"AT", "ASSERT", "ASSERT_NOT"}
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _name(op) -> str:
    return str(op)


@functools.lru_cache(maxsize=1024)
def _parse(source: str):
    """Cached: the catalogue loader and the scanner ask about the same sources (read-only trees)."""
    if _p is None:
        return None
    try:
        return _p.parse(source)
    except Exception:  # noqa: BLE001 - re.compile reports the real error to the catalogue loader
        return None


def _exact(items) -> frozenset[str] | None:
    """Every string the item sequence can match, when that is a small finite set of literals."""
    strings = {""}
    for op, av in items:
        kind = _name(op)
        if kind in _ZERO_WIDTH:
            continue  # consumes nothing: the literals around it stay adjacent
        piece = _exact_item(kind, av)
        if piece is None:
            return None
        strings = {s + p for s in strings for p in piece}
        if len(strings) > _MAX_ALTERNATIVES or max(map(len, strings)) > _MAX_LITERAL:
            return None
    return frozenset(strings)


def _exact_item(kind: str, av) -> frozenset[str] | None:
    if kind == "LITERAL":
        return frozenset({chr(av)})
    if kind == "IN" and len(av) == 1 and _name(av[0][0]) == "LITERAL":
        return frozenset({chr(av[0][1])})
    if kind == "SUBPATTERN":
        return _exact(av[3])
    if kind == "ATOMIC_GROUP":
        return _exact(av)
    if kind == "BRANCH":
        found: set[str] = set()
        for alternative in av[1]:
            strings = _exact(alternative)
            if strings is None:
                return None
            found |= strings
        return frozenset(found)
    return None


def _required(items, start: frozenset[str] = frozenset({""})) -> list[frozenset[str]]:
    """Candidate sets: for each, every match of the sequence contains one of its strings.
    `start` is the literal text that certainly precedes the sequence (to extend across a branch)."""
    candidates: list[frozenset[str]] = []
    run = start

    def flush() -> None:
        if run != frozenset({""}):
            candidates.append(run)

    for op, av in items:
        kind = _name(op)
        if kind in _ZERO_WIDTH:
            continue
        piece = _exact_item(kind, av)
        if piece is not None:
            grown = frozenset(s + p for s in run for p in piece)
            if len(grown) > _MAX_ALTERNATIVES or max(map(len, grown)) > _MAX_LITERAL:
                flush()
                grown = piece
            run = grown
            continue
        flush()
        if kind == "BRANCH":
            # Each alternative may continue the literal run before the branch ("f(?:oo|ar\d)").
            bests = [_best(_required(alternative, run)) for alternative in av[1]]
            if all(b is not None for b in bests):
                candidates.append(frozenset().union(*bests))
        elif kind == "SUBPATTERN":
            candidates.extend(_required(av[3], run))
        elif kind == "ATOMIC_GROUP":
            candidates.extend(_required(av, run))
        elif kind in _REPEATS and av[0] >= 1:
            candidates.extend(_required(av[2]))
        run = frozenset({""})
    flush()
    return candidates


def _best(candidates: list[frozenset[str]]) -> frozenset[str] | None:
    """The most selective candidate: longest shortest string, then fewest strings."""
    usable = [c for c in candidates if c and min(map(len, c)) >= MIN_KEYWORD]
    if not usable:
        return None
    return max(usable, key=lambda c: (min(map(len, c)), -len(c)))


def required_literals(source: str) -> frozenset[str] | None:
    """Lower-cased literals of which every match contains one, or None when there is no usable set."""
    tree = _parse(source)
    if tree is None:
        return None
    best = _best(_required(list(tree)))
    if best is None:
        return None
    lowered = {s.lower() for s in best}
    # A string that contains another member adds nothing: the shorter one is found wherever it is.
    return frozenset(s for s in lowered if not any(o != s and o in s for o in lowered))


def backtracking_risk(source: str) -> str | None:
    tree = _parse(source)
    if tree is None:
        return None
    return _risk(list(tree), looping=False)


def _risk(items, looping: bool) -> str | None:
    for op, av in items:
        kind = _name(op)
        if kind in _REPEATS:
            low, high, body = av
            if looping and low != high:
                return "a variable quantifier inside a repeated group (e.g. (a+)+) can backtrack exponentially"
            found = _risk(list(body), looping or high > 1)
        elif kind == "BRANCH":
            if looping and len(av[1]) > 1:
                return "an alternation inside a repeated group (e.g. (a|ab)*) can backtrack exponentially"
            found = next((r for alt in av[1] if (r := _risk(list(alt), looping))), None)
        elif kind == "SUBPATTERN":
            found = _risk(list(av[3]), looping)
        elif kind == "ATOMIC_GROUP":
            found = _risk(list(av), looping)
        elif kind in ("ASSERT", "ASSERT_NOT"):
            found = _risk(list(av[1]), looping)
        else:
            found = None
        if found:
            return found
    return None


def top_level_alternatives(source: str) -> list[str]:
    """The pattern's top-level alternatives as source text (`a|b(c|d)` -> `a`, `b(c|d)`), or the
    whole pattern when it has one. Lets the scanner try only the alternatives whose literals a line
    holds: Python's `re` tries each alternative at each position, so splitting a large pattern saves
    most of its cost. The caller compiles each piece with the whole pattern's flags."""
    pieces, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(source):
        ch = source[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if source[i + 1: i + 2] == "^":
                i += 1
            if source[i + 1: i + 2] == "]":
                i += 1  # a leading "]" is a literal in a class
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            pieces.append(source[start:i])
            start = i + 1
        i += 1
    pieces.append(source[start:])
    return pieces
