"""The operator's policy file (validated whole, unknown keys are errors) and resolve(): a job's comment
against it -> the job's effective Policy. Pure: the file arrives parsed (policy_file.py reads it).
The decider resolves every job's policy with it, and `relaunch policy check` the same way, offline.

Invariants:
- a job never gets more than its named policy allows: every job option is checked against the
  policy's cap and a looser value is an error, not a silent clamp, so the person who wrote it learns;
- any error (grammar or policy) leaves the job observe-only, with every error listed;
- a key missing from a policy takes the built-in default (Policy's own), never another policy's;
  except max_attempts_cap, which then equals the policy's max_attempts (a job may only lower it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from relaunch.common.optin import OPTIONS, POLICY_NAME, OptIn

from .model import FAULT_CLASSES, IB_PAIRS, Budgets, Policy

FILE_VERSION = 1
MAX_HANG_TIMEOUT = 7 * 86400


class PolicyFileError(ValueError):
    """The policy file is unreadable or invalid; the message names the file and every bad key."""


@dataclass(frozen=True)
class PolicySet:
    source: str
    """Where the policies came from (a path, or the built-in file), for messages."""
    default: str
    policies: Mapping[str, Policy]

    def names(self) -> list[str]:
        return sorted(self.policies)


# key: (kind, minimum, maximum, Policy field). Kinds: int, bool, straggler (off | opt-in | on).
_POLICY_KEYS: dict[str, tuple[str, int, int, str]] = {
    "max_attempts": ("int", 1, 1000, "max_attempts"),
    "max_attempts_cap": ("int", 1, 1000, "max_attempts_cap"),
    "max_exclude": ("int", 0, 64, "max_exclude"),
    "hang_timeout_cap": ("int", 0, MAX_HANG_TIMEOUT, "hang_timeout_cap"),
    "restart_on_time_limit": ("bool", 0, 1, "restart_on_time_limit"),
    "restart_on_preemption": ("bool", 0, 1, "restart_on_preemption"),
    "stop_without_progress": ("bool", 0, 1, "stop_without_progress"),
    "failures_without_checkpoint": ("int", 0, 1000, "failures_without_checkpoint"),
    "terminate_hung": ("bool", 0, 1, "terminate_hung"),
    "straggler": ("straggler", 0, 0, ""),
    "ib_pair": ("ib_pair", 0, 0, "ib_pair"),
}
_TABLES = ("budgets", "storm")
_STORM_KEYS = {"restarts": (0, 1000, "storm_restarts"), "window_s": (1, 30 * 86400, "storm_window_s")}
_STRAGGLER = {"off": (False, False), "opt-in": (True, False), "on": (True, True)}
"""straggler mode -> (a job may turn it on, on unless the job says off)."""


def parse_policies(data: Mapping[str, Any], source: str) -> PolicySet:
    errors: list[str] = []

    def bad(key: str, message: str) -> None:
        errors.append(f"{source}: {key}: {message}")

    for key in data:
        if key not in ("version", "default_policy", "policy"):
            bad(key, "unknown key (known: version, default_policy, policy)")
    if data.get("version", FILE_VERSION) != FILE_VERSION:
        bad("version", f"this decider reads version {FILE_VERSION}, not {data['version']!r}")
    default = data.get("default_policy", "default")
    tables = data.get("policy", {})
    policies: dict[str, Policy] = {}
    if not isinstance(tables, Mapping) or not tables:
        bad("policy", "define at least one policy as a [policy.NAME] table")
        tables = {}
    for name, table in tables.items():
        where = f"policy.{name}"
        if not POLICY_NAME.fullmatch(name):
            bad(where, "a policy name is 1-32 of a-z, 0-9, '_', '-', starting with a letter or digit")
        elif not isinstance(table, Mapping):
            bad(where, "must be a table")
        else:
            policies[name] = _policy(name, table, where, bad)
    if not isinstance(default, str) or default not in tables:
        defined = ", ".join(sorted(tables)) or "none"
        bad("default_policy", f"{default!r} is not a policy of this file (defined: {defined})")
    if errors:
        raise PolicyFileError("invalid policy file:\n  " + "\n  ".join(errors))
    return PolicySet(source, default, policies)


def _policy(name: str, table: Mapping[str, Any], where: str, bad) -> Policy:
    changes: dict[str, Any] = {"name": name}
    for key, value in table.items():
        if key == "description":
            if not isinstance(value, str):
                bad(f"{where}.{key}", "must be a string")
        elif key == "budgets":
            changes["budgets"] = _budgets(value, f"{where}.{key}", bad)
        elif key == "storm":
            changes.update(_storm(value, f"{where}.{key}", bad))
        elif key == "straggler":
            if value not in _STRAGGLER:
                bad(f"{where}.{key}", f"must be \"off\", \"opt-in\" or \"on\", not {value!r}")
            else:
                changes["straggler_allowed"], changes["straggler"] = _STRAGGLER[value]
        elif key == "ib_pair":
            if value not in IB_PAIRS:
                bad(f"{where}.{key}", f"must be {' or '.join(repr(v) for v in IB_PAIRS)}, not {value!r}")
            else:
                changes["ib_pair"] = value
        elif key in _POLICY_KEYS:
            kind, low, high, attr = _POLICY_KEYS[key]
            if _check(value, kind, low, high, f"{where}.{key}", bad):
                changes[attr] = value
        else:
            known = sorted([*_POLICY_KEYS, *_TABLES, "description"])
            bad(f"{where}.{key}", f"unknown key (known: {', '.join(known)})")
    hang = changes.get("hang_timeout_cap", 0)
    if 0 < hang < 10:
        bad(f"{where}.hang_timeout_cap", "must be 0 (no cap) or at least 10 seconds")
    changes.setdefault("max_attempts_cap", changes.get("max_attempts", Policy.max_attempts))
    if "max_attempts" in changes and changes["max_attempts_cap"] < changes["max_attempts"]:
        bad(f"{where}.max_attempts_cap", f"must be at least max_attempts ({changes['max_attempts']})")
    return replace(Policy(), **changes)


def _check(value: Any, kind: str, low: int, high: int, key: str, bad) -> bool:
    # TOML's true is a Python int too; a cap written `true` is a mistake, not 1.
    if kind == "bool":
        if not isinstance(value, bool):
            bad(key, f"must be true or false, not {value!r}")
            return False
        return True
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        bad(key, f"must be an integer from {low} to {high}, not {value!r}")
        return False
    return True


def _budgets(table: Any, where: str, bad) -> Budgets:
    if not isinstance(table, Mapping):
        bad(where, "must be a table of failure class = restarts")
        return Budgets()
    changes = {}
    for key, value in table.items():
        if key not in FAULT_CLASSES:
            bad(f"{where}.{key}", f"unknown failure class (known: {', '.join(FAULT_CLASSES)})")
        elif _check(value, "int", 0, 1000, f"{where}.{key}", bad):
            changes[key] = value
    return replace(Budgets(), **changes)


def _storm(table: Any, where: str, bad) -> dict[str, int]:
    if not isinstance(table, Mapping):
        bad(where, "must be a table with restarts and window_s")
        return {}
    changes = {}
    for key, value in table.items():
        if key not in _STORM_KEYS:
            bad(f"{where}.{key}", f"unknown key (known: {', '.join(_STORM_KEYS)})")
            continue
        low, high, attr = _STORM_KEYS[key]
        if _check(value, "int", low, high, f"{where}.{key}", bad):
            changes[attr] = value
    return changes


def resolve(optin: OptIn, policies: PolicySet) -> Policy:
    """The job's effective policy: its named (or the default) policy, tightened by its options.
    Errors make it observe-only; it still carries the policy's values, for people to read."""
    errors = list(optin.errors)
    if not optin.opted_in:
        errors.append("the comment does not opt in (no 'relaunch' token)")
    name = optin.policy or policies.default
    base = policies.policies.get(name)
    if base is None:
        errors.append(f"policy {name!r} is not one the operator approved (known: {', '.join(policies.names())})")
        base = policies.policies[policies.default]
    changes: dict[str, Any] = {}

    def loosens(option: str, value: object, limit: str) -> None:
        errors.append(f"{option}={value} loosens policy {base.name!r} ({limit}); a job may only tighten its policy")

    opts = optin.options
    for option, cap, unit in (("max_attempts", base.max_attempts_cap, ""), ("max_exclude", base.max_exclude, ""),
                              ("hang_timeout", base.hang_timeout_cap or MAX_HANG_TIMEOUT, " s")):
        if option in opts:
            if opts[option] > cap:
                loosens(option, opts[option], f"at most {cap}{unit}")
            else:
                changes[option] = opts[option]
    if "checkpoint_failures" in opts:  # fewer failures without a save tighten; 0 (off) loosens an armed rule
        wanted, limit = opts["checkpoint_failures"], base.failures_without_checkpoint
        if limit and (wanted == 0 or wanted > limit):
            loosens("checkpoint_failures", wanted, f"it stops after {limit} failures without a checkpoint")
        else:
            changes["failures_without_checkpoint"] = wanted
    if opts.get("exclude") == 0:
        changes["max_exclude"] = 0
    elif opts.get("exclude") == 1 and base.max_exclude == 0:
        loosens("exclude", "on", "it leaves no node out")
    if opts.get("straggler") == 1 and not base.straggler_allowed:
        loosens("straggler", "on", "straggler recovery is off")
    elif "straggler" in opts:
        changes["straggler"] = bool(opts["straggler"])
    for option, attr, event in (("time_limit", "restart_on_time_limit", "a time limit"),
                                ("preemption", "restart_on_preemption", "a preemption")):
        if opts.get(option) == 1 and not getattr(base, attr):
            loosens(option, "on", f"it does not restart after {event}")
        elif option in opts:
            changes[attr] = bool(opts[option])
    if "divergence" in opts:
        changes["divergence"] = OPTIONS["divergence"].choices[opts["divergence"]]
    return replace(base, **changes, observe_only=bool(errors), option_errors=tuple(errors))


def policy_keys() -> list[str]:
    """Every key a [policy.NAME] table accepts (for docs and tests)."""
    return sorted([*_POLICY_KEYS, "description", *(f"budgets.{c}" for c in FAULT_CLASSES),
                   *(f"storm.{k}" for k in _STORM_KEYS)])

