"""The opt-in grammar of the Slurm job comment (contract: DESIGN.md section 6, issue 2).

A job takes part when its comment holds the token `relaunch`, optionally with options:
`relaunch:key=value,key=value` (no spaces). Other text may share the comment, separated by
whitespace or ';'. Unknown or malformed options do not opt the job out: it is tracked
observe-only and `errors` says exactly what was wrong.

Pure: no I/O. The comment is user-supplied text; it is only ever parsed, never executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TOKEN = "relaunch"
MAX_COMMENT = 4096
"""Longer comments are cut before parsing; Slurm itself allows more, we need none of it."""

_SEPARATORS = re.compile(r"[\s;]+")


@dataclass(frozen=True)
class OptionSpec:
    name: str
    kind: str
    """"int" (minimum..maximum) or "switch" (on | off, stored as 1 | 0)."""
    minimum: int
    maximum: int
    default: int
    doc: str


OPTIONS: dict[str, OptionSpec] = {
    "max_attempts": OptionSpec("max_attempts", "int", 1, 100, 3,
                               "how many attempts the job may have in all, the first included"),
    "hang_timeout": OptionSpec("hang_timeout", "int", 10, 7 * 86400, 0,
                               "seconds without progress before a hang, at least (0: calibrated from step times)"),
    "straggler": OptionSpec("straggler", "switch", 0, 1, 0,
                            "on: restart (without the slow node) when the job straggles; off: only report it"),
}
_SWITCH = {"on": 1, "off": 0, "true": 1, "false": 0, "1": 1, "0": 0}


@dataclass(frozen=True)
class OptIn:
    opted_in: bool
    options: dict[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    @property
    def observe_only(self) -> bool:
        return self.opted_in and bool(self.errors)

    def get(self, name: str) -> int:
        return self.options.get(name, OPTIONS[name].default)

    @property
    def max_attempts(self) -> int:
        return self.get("max_attempts")


def parse_comment(comment: str | None) -> OptIn:
    if not comment:
        return OptIn(False)
    tokens = [t for t in _SEPARATORS.split(comment[:MAX_COMMENT]) if t]
    ours = [t for t in tokens if t == TOKEN or t.startswith(TOKEN + ":")]
    if not ours:
        return OptIn(False)
    errors: list[str] = []
    if len(ours) > 1:
        errors.append(f"the comment holds {len(ours)} relaunch tokens; give exactly one")
    options: dict[str, int] = {}
    _, _, raw = ours[0].partition(":")
    for item in filter(None, raw.split(",")):
        key, eq, value = item.partition("=")
        spec = OPTIONS.get(key)
        if not eq:
            errors.append(f"option {item[:40]!r} has no '=value'")
        elif spec is None:
            errors.append(f"unknown option {key[:40]!r} (known: {', '.join(sorted(OPTIONS))})")
        elif key in options:
            errors.append(f"option {key} is given twice")
        elif spec.kind == "switch":
            if value.lower() not in _SWITCH:
                errors.append(f"{key} must be on or off, not {value[:40]!r}")
            else:
                options[key] = _SWITCH[value.lower()]
        elif not value.isdigit() or not spec.minimum <= int(value) <= spec.maximum:
            errors.append(f"{key} must be an integer from {spec.minimum} to {spec.maximum}, not {value[:40]!r}")
        else:
            options[key] = int(value)
    return OptIn(True, options, tuple(errors))
