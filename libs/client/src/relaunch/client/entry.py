"""The `relaunch` executable: `relaunch classify ...` runs classify_command alone (no typer, rich,
httpx, NATS or pydantic: its start-up is benchmarked, bench/scan_speed.py); everything else, and
`relaunch classify --help`, goes to the full CLI (cli.py)."""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["classify"] and not {"-h", "--help"} & set(args[1:]):
        from .classify_command import main as classify

        try:
            sys.exit(classify(args[1:]))
        except BrokenPipeError:
            sys.exit(0)
    from .cli import main as full

    full()
