"""The opt-in grammar of the Slurm job comment, version 5 (contract: docs/policy.md, "The job comment").

A job takes part when its comment holds the token `relaunch`, optionally with options:
`relaunch:key=value,key=value` (no spaces). Other text may share the comment, separated by
whitespace or ';'. `policy=NAME` names an operator-approved policy; every other option may only
tighten that policy's caps (checked by the decider against the operator's policy file, which this
module does not read). Unknown or malformed options do not opt the job out: it is tracked
observe-only and `errors` says exactly what was wrong.

Version 2 only adds options to version 1 (`max_attempts`, `hang_timeout`, `straggler`), and version 3
only `straggler_threshold` to version 2: every earlier comment means the same under version 3.
Version 4 reads options written with spaces after the colon or after a comma (`relaunch: max_attempts=1`,
`relaunch:max_attempts=1, hang_timeout=600`) as the options they look like: version 3 left such a piece
as other text and so dropped the option in silence. Only a piece holding '=' right after `relaunch:` or
after a trailing ',' is joined, so a wrong key there is an error (observe-only), never a silence; every
comment written as version 3 documents it (no spaces inside the token) means the same. Version 5 only
adds `checkpoint_failures` to version 4.

Pure: no I/O. The comment is user-supplied text (anyone who can submit a job writes it): it is only
ever parsed, never executed; numbers are matched as ASCII digits of bounded length (str.isdigit
accepts '²', which int() then refuses), and every piece of it quoted in an error is cut and repr()'d.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GRAMMAR_VERSION = 5
TOKEN = "relaunch"
MAX_COMMENT = 4096
"""Longer comments are cut before parsing; Slurm itself allows more, we need none of it."""
MAX_ERRORS = 10
"""At most this many errors are listed (then a count): a hostile comment cannot flood the audit."""

_SEPARATORS = re.compile(r"[\s;]+")
_SPACED_OPTIONS = re.compile(r"(?<![^\s;])(relaunch:(?:[^\s;]*,)?)[ \t]+(?=[^\s;]*=)")
"""`relaunch:` or `relaunch:a=1,` then spaces and a piece holding '=': the spaces are dropped (version 4).
Repeated (at most once per known option, and once more) so that `relaunch: a=1, b=2` joins both pieces."""
_NUMBER = re.compile(r"[0-9]{1,9}")
POLICY_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
"""What a policy name may be, in a comment and in the operator's policy file alike."""


@dataclass(frozen=True)
class OptionSpec:
    name: str
    kind: str
    """"int" (minimum..maximum), "switch" (on | off, stored as 1 | 0) or "name" (a policy name)."""
    minimum: int
    maximum: int
    default: int
    doc: str
    choices: tuple[str, ...] = ()
    """"choice" options: the words allowed, stored as their index."""


OPTIONS: dict[str, OptionSpec] = {
    "policy": OptionSpec("policy", "name", 0, 0, 0,
                         "the operator-approved policy to follow (default: the operator's default policy)"),
    "max_attempts": OptionSpec("max_attempts", "int", 1, 100, 3,
                               "how many attempts the job may have in all, the first included"),
    "hang_timeout": OptionSpec("hang_timeout", "int", 10, 7 * 86400, 0,
                               "seconds without progress before a hang, at least (0: calibrated from step times)"),
    "straggler": OptionSpec("straggler", "switch", 0, 1, 0,
                            "on: restart (without the slow node) when the job straggles; off: only report it"),
    "straggler_threshold": OptionSpec("straggler_threshold", "int", 5, 90, 0,
                                      "percent below the job's own throughput baseline that makes a straggler "
                                      "(0: the detector's setting, 20 by default)"),
    "exclude": OptionSpec("exclude", "switch", 0, 1, 1,
                          "on: a restart leaves out the nodes attribution blames; off: restart on any nodes"),
    "max_exclude": OptionSpec("max_exclude", "int", 0, 64, 2,
                              "at most this many nodes are left out of the job over its life"),
    "time_limit": OptionSpec("time_limit", "switch", 0, 1, 1,
                             "on: restart after Slurm's time limit (the job resumes from a checkpoint); off: stop"),
    "preemption": OptionSpec("preemption", "switch", 0, 1, 1,
                             "on: restart after a preemption; off: stop"),
    "divergence": OptionSpec("divergence", "choice", 0, 2, 0,
                             "stop: cancel a diverged run (NaN loss, loss-scale collapse, skipped-step storm); "
                             "report: only report it; restart: restart it (from its last checkpoint)",
                             choices=("stop", "report", "restart")),
    "checkpoint_failures": OptionSpec("checkpoint_failures", "int", 0, 100, 2,
                                      "stop the job when this many failed attempts in a row saved no checkpoint "
                                      "(once relaunch has seen it save one; 0: never)"),
}
_SWITCH = {"on": 1, "off": 0, "true": 1, "false": 0, "1": 1, "0": 0}


@dataclass(frozen=True)
class OptIn:
    opted_in: bool
    options: dict[str, int] = field(default_factory=dict)
    """The options the comment gives, as integers (switches 1 | 0); `policy` is kept apart in `policy`
    so that readers of numeric options (the detector) never meet a string."""
    errors: tuple[str, ...] = ()
    policy: str | None = None
    """The policy the comment names, or None for the operator's default."""

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
    text = comment[:MAX_COMMENT]
    for _ in range(len(OPTIONS) + 1):  # bounded: a hostile comment cannot make this loop long
        text, joined = _SPACED_OPTIONS.subn(r"\1", text)
        if not joined:
            break
    tokens = [t for t in _SEPARATORS.split(text) if t]
    ours = [t for t in tokens if t == TOKEN or t.startswith(TOKEN + ":")]
    if not ours:
        return OptIn(False)
    errors: list[str] = []
    if len(ours) > 1:
        errors.append(f"the comment holds {len(ours)} relaunch tokens; give exactly one")
    options: dict[str, int] = {}
    policy: str | None = None
    seen: set[str] = set()
    _, _, raw = ours[0].partition(":")
    for item in filter(None, raw.split(",")):
        key, eq, value = item.partition("=")
        spec = OPTIONS.get(key)
        if not eq:
            errors.append(f"option {item[:40]!r} has no '=value'")
        elif spec is None:
            errors.append(f"unknown option {key[:40]!r} (known: {', '.join(sorted(OPTIONS))})")
        elif key in seen:
            errors.append(f"option {key} is given twice")
        elif spec.kind == "name":
            seen.add(key)
            if POLICY_NAME.fullmatch(value):
                policy = value
            else:
                errors.append(f"{key} must be a policy name (a-z, 0-9, '_', '-'; at most 32), not {value[:40]!r}")
        elif spec.kind == "choice":
            seen.add(key)
            if value.lower() not in spec.choices:
                errors.append(f"{key} must be one of {', '.join(spec.choices)}, not {value[:40]!r}")
            else:
                options[key] = spec.choices.index(value.lower())
        elif spec.kind == "switch":
            seen.add(key)
            if value.lower() not in _SWITCH:
                errors.append(f"{key} must be on or off, not {value[:40]!r}")
            else:
                options[key] = _SWITCH[value.lower()]
        else:
            seen.add(key)
            if not _NUMBER.fullmatch(value) or not spec.minimum <= int(value) <= spec.maximum:
                errors.append(f"{key} must be an integer from {spec.minimum} to {spec.maximum}, not {value[:40]!r}")
            else:
                options[key] = int(value)
    if len(errors) > MAX_ERRORS:
        errors = errors[:MAX_ERRORS] + [f"... and {len(errors) - MAX_ERRORS} more errors"]
    return OptIn(True, options, tuple(errors), policy)
