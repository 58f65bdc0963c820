"""The signature catalogue: loading and validating it. Pure (the loaders read packaged or operator files).

A catalogue is data (TOML, see signatures.toml) with three kinds of entries:
  [[signature]]  a pattern, and what a line that matches it means;
  [[xid_class]]  what an NVIDIA XID code means, for signatures whose pattern captures `xid`;
  [[locator]]    where node names and ranks hide in a line (tried on every line a signature matched).

Invariants: everything is validated at load; an unknown key or a bad value stops the service with a
message naming the file and the entry. Every pattern compiles, cannot match an empty line, has no
nested quantifier (pattern_analysis), uses only the named groups the scanner understands, and
matches each of its own `examples`. Matching is bounded per line (MAX_LINE characters).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from relaunch.common.verdicts import Action, FaultDomain

from .pattern_analysis import backtracking_risk, required_literals

MAX_LINE = 8192
"""Only the first MAX_LINE characters of a line are matched: bounded time on 10 MB lines."""

ROLES = ("decisive", "cause", "symptom", "teardown", "advice", "where")
"""How a matched line competes to be the root cause (classifying.py): a decisive line (a hardware
fault, a host OOM kill, a node failure) explains everything printed around it; causes are initiating
errors; symptoms are what victims print (collective timeouts, peers gone); teardown is what launchers
print while stopping; advice (framework hints, warnings) is never a root cause; a `where` line (a
launcher's report of the host a rank ran on) is never a root cause either, but says where a failure
printed without a host happened (classifying.py, `places`)."""

GROUPS = frozenset({"node", "rank", "xid", "gpu", "pid"})
"""Named groups a pattern may use: culprit node, global rank, XID code, GPU bus id, process id."""

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_SIGNATURE_KEYS = ({"id", "pattern", "category", "fault_domain", "action", "cascade", "summary"},
                   {"role", "examples", "places"})
_XID_KEYS = ({"id", "codes", "category", "fault_domain", "action", "cascade", "summary"},
             {"role", "escalate_to", "escalate_after"})
_LOCATOR_KEYS = ({"id", "pattern"}, {"examples"})


class CatalogueError(ValueError):
    pass


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: re.Pattern[str] | None
    """None for an XID class: it is reached through the pattern that captured the code."""
    category: str
    fault_domain: str
    action: str
    cascade: bool
    summary: str
    role: str = "cause"
    keywords: frozenset[str] | None = None
    """Lower-cased literals of which every match contains one (derived); None: try on every line."""
    examples: tuple[str, ...] = ()
    codes: tuple[int, ...] = ()
    """XID classes: the codes they cover."""
    escalate_to: Signature | None = None
    escalate_after: int = 0
    """XID classes: seen from this many distinct processes on one GPU, the finding becomes escalate_to
    (an application-class XID that keeps coming back on the same GPU is the GPU's fault)."""
    places: bool = False
    """The hosts a matched line names are where the tasks or ranks it names ran (a launcher's report:
    srun's `srun: error: node4: task 3: ...`, torchrun's error summary): what names the culprit of a
    failure printed without its host (classifying.py). True for every `where` signature."""


@dataclass(frozen=True)
class Locator:
    id: str
    pattern: re.Pattern[str]


@dataclass(frozen=True, eq=False)
class Catalogue:
    """Identity-hashed so the scanner built from it can be cached per catalogue object."""

    signatures: tuple[Signature, ...]
    xid_classes: Mapping[int, Signature]
    locators: tuple[Locator, ...]

    def __iter__(self):
        return iter(self.signatures)

    def __len__(self) -> int:
        return len(self.signatures)


BUILTIN_FILE = Path(__file__).with_name("signatures.toml")
"""The built-in catalogue (package data beside this module)."""


def parse_catalogue(text: str, origin: str) -> Catalogue:
    import tomllib  # here: `relaunch classify` reads a cached scanner and parses no TOML (its start-up is benchmarked)

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{origin}: not valid TOML: {exc}") from exc
    unknown_top = set(data) - {"signature", "xid_class", "locator"}
    if unknown_top:
        raise CatalogueError(f"{origin}: unknown top-level keys {sorted(unknown_top)}; "
                             "use [[signature]], [[xid_class]] or [[locator]] tables")
    classes = _xid_classes(_tables(data, "xid_class", origin), origin)
    signatures = [_signature(raw, f"{origin}: signature #{n} ({_label(raw)})")
                  for n, raw in enumerate(_tables(data, "signature", origin), start=1)]
    locators = [_locator(raw, f"{origin}: locator #{n} ({_label(raw)})")
                for n, raw in enumerate(_tables(data, "locator", origin), start=1)]
    return _combine([Catalogue(tuple(signatures), classes, tuple(locators))], origin)


def _tables(data: dict, key: str, origin: str) -> list[dict]:
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise CatalogueError(f"{origin}: {key} must be an array of tables ([[{key}]])")
    return tables


def _label(raw: dict) -> str:
    return str(raw.get("id", "?"))


def _check_keys(raw: dict, keys: tuple[set[str], set[str]], where: str) -> None:
    required, optional = keys
    missing, unknown = required - set(raw), set(raw) - required - optional
    if missing or unknown:
        raise CatalogueError(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}")


def _typed(raw: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = raw[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CatalogueError(f"{where}: {key} has the wrong type ({type(value).__name__})")
    return value


def _verdict(raw: dict, where: str) -> dict[str, Any]:
    """The fields shared by signatures and XID classes: what a matched line means."""
    if not _ID.match(_typed(raw, "id", str, where)):
        raise CatalogueError(f"{where}: id must be lower-case letters, digits, '_', '.' or '-'")
    for key in ("category", "summary"):
        if not _typed(raw, key, str, where).strip():
            raise CatalogueError(f"{where}: {key} is empty")
    if raw["fault_domain"] not in get_args(FaultDomain):
        raise CatalogueError(f"{where}: fault_domain must be one of {get_args(FaultDomain)}")
    if raw["action"] not in get_args(Action):
        raise CatalogueError(f"{where}: action must be one of {get_args(Action)}")
    cascade = _typed(raw, "cascade", bool, where)
    role = raw.get("role", "symptom" if cascade else "cause")
    if role not in ROLES:
        raise CatalogueError(f"{where}: role must be one of {ROLES}")
    if cascade != (role in ("symptom", "teardown")):
        raise CatalogueError(f"{where}: cascade must be true exactly for the symptom and teardown roles")
    return dict(id=raw["id"], category=raw["category"], fault_domain=raw["fault_domain"], action=raw["action"],
                cascade=cascade, summary=raw["summary"], role=role)


def _compile(raw: dict, where: str) -> re.Pattern[str]:
    source = _typed(raw, "pattern", str, where)
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise CatalogueError(f"{where}: bad pattern: {exc}") from exc
    if pattern.search(""):
        raise CatalogueError(f"{where}: bad pattern: it matches an empty line")
    risk = backtracking_risk(source)
    if risk:
        raise CatalogueError(f"{where}: bad pattern: {risk}")
    unknown = set(pattern.groupindex) - GROUPS
    if unknown:
        raise CatalogueError(f"{where}: bad pattern: unknown named groups {sorted(unknown)}; "
                             f"use {sorted(GROUPS)}")
    examples = raw.get("examples", [])
    if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
        raise CatalogueError(f"{where}: examples must be a list of strings")
    for example in examples:
        if not pattern.search(example[:MAX_LINE]):
            raise CatalogueError(f"{where}: the pattern does not match its example {example[:120]!r}")
    return pattern


def _signature(raw: dict, where: str) -> Signature:
    _check_keys(raw, _SIGNATURE_KEYS, where)
    verdict = _verdict(raw, where)
    pattern = _compile(raw, where)
    places = raw.get("places", False) is True or verdict["role"] == "where"
    if "places" in raw and not isinstance(raw["places"], bool):
        raise CatalogueError(f"{where}: places must be true or false")
    if verdict["role"] == "where" and not {"node", "rank"} & set(pattern.groupindex):
        raise CatalogueError(f"{where}: a `where` pattern needs a `node` or `rank` group")
    return Signature(pattern=pattern, keywords=required_literals(pattern.pattern),
                     examples=tuple(raw.get("examples", [])), places=places, **verdict)


def _locator(raw: dict, where: str) -> Locator:
    _check_keys(raw, _LOCATOR_KEYS, where)
    pattern = _compile(raw, where)
    if not {"node", "rank"} & set(pattern.groupindex):
        raise CatalogueError(f"{where}: a locator pattern needs a `node` or `rank` group")
    return Locator(_typed(raw, "id", str, where), pattern)


def _xid_classes(tables: list[dict], origin: str) -> dict[int, Signature]:
    parsed: dict[str, tuple[Signature, str | None]] = {}
    for n, raw in enumerate(tables, start=1):
        where = f"{origin}: xid_class #{n} ({_label(raw)})"
        _check_keys(raw, _XID_KEYS, where)
        codes = _typed(raw, "codes", list, where)
        if not codes or not all(isinstance(c, int) and not isinstance(c, bool) and 0 < c < 10000 for c in codes):
            raise CatalogueError(f"{where}: codes must be a non-empty list of XID numbers")
        after = raw.get("escalate_after", 0)
        if ("escalate_to" in raw) != ("escalate_after" in raw) or (
                "escalate_after" in raw and (not isinstance(after, int) or after < 2)):
            raise CatalogueError(f"{where}: escalate_to and escalate_after (>= 2) go together")
        sig = Signature(pattern=None, codes=tuple(codes), escalate_after=after, **_verdict(raw, where))
        parsed[sig.id] = (sig, raw.get("escalate_to"))
    resolved: dict[str, Signature] = {}
    for sig_id, (sig, target) in parsed.items():
        if target is not None:
            if target not in parsed or parsed[target][1] is not None:
                raise CatalogueError(f"{origin}: xid_class {sig_id}: escalate_to must name an xid_class "
                                     "that does not escalate itself")
            sig = dataclasses.replace(sig, escalate_to=parsed[target][0])
        resolved[sig_id] = sig
    by_code: dict[int, Signature] = {}
    for sig in resolved.values():
        for code in sig.codes:
            if code in by_code:
                raise CatalogueError(f"{origin}: XID {code} is in both {by_code[code].id} and {sig.id}")
            by_code[code] = sig
    return by_code


def _combine(parts: list[Catalogue], origin: str) -> Catalogue:
    """Entries of earlier parts are tried first; ids and XID codes must stay unique."""
    signatures = tuple(s for part in parts for s in part.signatures)
    classes: dict[int, Signature] = {}
    for part in parts:
        for code, sig in part.xid_classes.items():
            if code in classes:
                raise CatalogueError(f"{origin}: XID {code} is classified twice ({classes[code].id}, {sig.id})")
            classes[code] = sig
    ids = [s.id for s in signatures] + sorted({s.id for s in classes.values()})
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CatalogueError(f"{origin}: duplicate signature ids {duplicates}")
    return Catalogue(signatures, classes, tuple(loc for part in parts for loc in part.locators))


@functools.cache
def builtin_catalogue() -> Catalogue:
    text = BUILTIN_FILE.read_text(encoding="utf-8")
    return parse_catalogue(text, "built-in signatures.toml")


def load_catalogue(extra_paths: list[str]) -> Catalogue:
    """Operator files first, so that their signatures are tried before the built-in ones (a line gets
    the first signature that matches it)."""
    parts = []
    for path in extra_paths:
        with open(path, encoding="utf-8") as fh:
            parts.append(parse_catalogue(fh.read(), path))
    if not parts:
        return builtin_catalogue()
    return _combine([*parts, builtin_catalogue()], "operator signature files with the built-in catalogue")
