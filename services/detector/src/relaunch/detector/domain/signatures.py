"""The signature catalogue: loading, validating and matching. Pure (the loader reads text it is given).

Invariants: every signature is validated at load (a bad pattern or field stops the service with a
message naming the file and the signature); matching is bounded per line (MAX_LINE chars).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import get_args

from relaunch.common.schemas import Action, FaultDomain

MAX_LINE = 8192
"""Only the first MAX_LINE characters of a line are matched: bounded time on 10 MB lines."""


class CatalogueError(ValueError):
    pass


@dataclass(frozen=True)
class Signature:
    id: str
    pattern: re.Pattern[str]
    category: str
    fault_domain: str
    action: str
    cascade: bool
    summary: str


@dataclass(frozen=True)
class Match:
    signature: Signature
    index: int
    """Position of the line in the batch."""
    text: str


_REQUIRED = {"id", "pattern", "category", "fault_domain", "action", "cascade", "summary"}


def parse_catalogue(text: str, origin: str) -> list[Signature]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{origin}: not valid TOML: {exc}") from exc
    unknown_top = set(data) - {"signature"}
    if unknown_top:
        raise CatalogueError(f"{origin}: unknown top-level keys {sorted(unknown_top)}; use [[signature]] tables")
    result = []
    for n, raw in enumerate(data.get("signature", []), start=1):
        where = f"{origin}: signature #{n} ({raw.get('id', '?')})"
        missing, unknown = _REQUIRED - set(raw), set(raw) - _REQUIRED
        if missing or unknown:
            raise CatalogueError(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}")
        if raw["fault_domain"] not in get_args(FaultDomain):
            raise CatalogueError(f"{where}: fault_domain must be one of {get_args(FaultDomain)}")
        if raw["action"] not in get_args(Action):
            raise CatalogueError(f"{where}: action must be one of {get_args(Action)}")
        try:
            pattern = re.compile(raw["pattern"])
        except re.error as exc:
            raise CatalogueError(f"{where}: bad pattern: {exc}") from exc
        result.append(Signature(raw["id"], pattern, raw["category"], raw["fault_domain"], raw["action"],
                                bool(raw["cascade"]), raw["summary"]))
    ids = [s.id for s in result]
    if len(ids) != len(set(ids)):
        raise CatalogueError(f"{origin}: duplicate signature ids")
    return result


def builtin_catalogue() -> list[Signature]:
    text = resources.files("relaunch.detector").joinpath("signatures.toml").read_text()
    return parse_catalogue(text, "built-in signatures.toml")


def load_catalogue(extra_paths: list[str]) -> list[Signature]:
    catalogue = builtin_catalogue()
    for path in extra_paths:
        with open(path, encoding="utf-8") as fh:
            catalogue.extend(parse_catalogue(fh.read(), path))
    ids = [s.id for s in catalogue]
    if len(ids) != len(set(ids)):
        raise CatalogueError("an operator signature file reuses a built-in signature id")
    return catalogue


def scan(lines: list[str], catalogue: list[Signature]) -> list[Match]:
    """Every (line, first matching signature) pair, in line order."""
    matches = []
    for index, line in enumerate(lines):
        head = line[:MAX_LINE]
        for sig in catalogue:
            if sig.pattern.search(head):
                matches.append(Match(sig, index, head))
                break
    return matches


def root_cause(matches: list[Match]) -> Match | None:
    """The earliest initiating error; a cascade symptom only when nothing else explains the failure."""
    for match in matches:
        if not match.signature.cascade:
            return match
    return matches[0] if matches else None
