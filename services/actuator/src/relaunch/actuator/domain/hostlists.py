"""Slurm hostlist expressions, e.g. `node[1-3,7],gpu-a01` -> node1 node2 node3 node7 gpu-a01. Pure."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000


def expand(expr: str) -> list[str]:
    """Expand a hostlist; raise ValueError on a malformed one (never guess)."""
    hosts: list[str] = []
    for item in _split_top(expr.strip()):
        if "[" not in item:
            hosts.append(item)
            continue
        prefix, _, rest = item.partition("[")
        body, close, suffix = rest.partition("]")
        if not close or "[" in suffix:
            raise ValueError(f"unsupported hostlist {expr!r}")
        for part in body.split(","):
            m = _RANGE.match(part)
            if not m:
                raise ValueError(f"bad range {part!r} in hostlist {expr!r}")
            lo, hi = m.group(1), m.group(2) or m.group(1)
            if int(hi) - int(lo) > MAX_HOSTS:
                raise ValueError(f"range {part!r} is too large")
            width = len(lo)
            hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(lo), int(hi) + 1))
    return hosts


def _split_top(expr: str) -> list[str]:
    """Split on commas that are outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(expr[start:i])
            start = i + 1
    items.append(expr[start:])
    return [item for item in items if item]
