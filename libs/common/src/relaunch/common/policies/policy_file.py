"""Reads the operator's policy file (or the built-in one shipped in this package) and validates it
whole, at start: a mistake stops the decider with the file and key named, never a silent default."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from .policy_set import PolicyFileError, PolicySet, parse_policies

BUILTIN = "policies.toml"


def load_policies(path: str | Path | None = None) -> PolicySet:
    """`path` empty or None: the built-in policies."""
    if path:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyFileError(f"cannot read policy file {source}: {getattr(exc, 'strerror', None) or exc}") from exc
    else:
        source = f"built-in {BUILTIN}"
        text = resources.files("relaunch.common.policies").joinpath(BUILTIN).read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyFileError(f"{source}: not valid TOML: {exc}") from exc
    return parse_policies(data, source)
