"""`relaunch classify`: what went wrong in training logs, offline (no server), by the live detector's own
pipeline (relaunch.common.diagnosis.offline.verdict_of_stream: the signatures, divergence and fp16
overflow storms from the progress lines, and the choice between them). Shared by the typer
command (cli.py, for `relaunch --help` and the tests) and the fast entry point (entry.py), which runs
it without importing the rest of the CLI: this module imports only the standard library at the top,
the scanner when it runs, and rich only for the readable (not --json) output, so the command starts
in a small fraction of the full CLI's start-up (docs/architecture.md, "Scale")."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

EXIT_OK, EXIT_USAGE = 0, 2
ENGINE_HELP = ("What picks the lines to match: auto (Hyperscan when installed, else Python), hyperscan or "
               "python. The results are the same; only the speed differs.")


def run(files: Sequence[str], as_json: bool, signatures: Sequence[str], engine: str) -> int:
    """Classifies each file in turn (`-` is standard input); returns the exit code: 2 when the
    signatures cannot be loaded, the engine cannot be used, or a file cannot be read (after the others)."""
    from relaunch.common.diagnosis.offline import load_scanner, verdict_of_stream
    from relaunch.common.diagnosis.scan_engines import ENGINES, EngineUnavailable
    from relaunch.common.diagnosis.signatures import CatalogueError

    if engine not in ENGINES:
        _error(f"--engine must be one of {', '.join(ENGINES)}")
        return EXIT_USAGE
    try:
        scanner = load_scanner([str(path) for path in signatures], engine)  # type: ignore[arg-type]
    except (CatalogueError, OSError) as exc:
        _error(f"cannot load signatures: {exc}")
        return EXIT_USAGE
    except EngineUnavailable as exc:
        _error(f"the hyperscan engine cannot be used: {exc}")
        return EXIT_USAGE
    unreadable = []
    for name in files:
        try:
            if name == "-":
                found = verdict_of_stream(_stdin_bytes(), scanner, line_numbers=not as_json)
            else:
                with open(name, "rb") as stream:
                    found = verdict_of_stream(stream, scanner, line_numbers=not as_json)
        except OSError as exc:
            unreadable.append(name)
            _error(f"cannot read {name}: {exc.strerror or exc}")
            continue
        if as_json:
            print(json.dumps({"file": name, "anomaly": anomaly_json(found)}), flush=True)
        else:
            print_classification(name, found)
    return EXIT_USAGE if unreadable else EXIT_OK


def main(argv: Sequence[str]) -> int:
    """The command from its arguments (after `classify`), as the typer command reads them."""
    parser = argparse.ArgumentParser(prog="relaunch classify", description=(
        "Say what went wrong in training logs, offline (no server): the root cause, its fault domain and "
        "what relaunch would do. Exit 2 when a file cannot be read."))
    parser.add_argument("files", nargs="+", help="Log files to classify; - reads standard input.")
    parser.add_argument("--json", dest="as_json", action="store_true", help="One JSON object per file per line.")
    parser.add_argument("--signatures", action="append", default=[], help=(
        "An operator signature file (TOML, tried before the built-in ones); repeatable."))
    parser.add_argument("--engine", default="auto", help=ENGINE_HELP)
    args = parser.parse_intermixed_args(list(argv))
    return run(args.files, args.as_json, args.signatures, args.engine)


def _error(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _stdin_bytes():
    return getattr(sys.stdin, "buffer", None) or _TextAsBytes(sys.stdin)


class _TextAsBytes:
    """Standard input that is text only (an embedding host, a test runner): read it as UTF-8 bytes."""

    def __init__(self, text_stream) -> None:
        self.text_stream = text_stream

    def read(self, size: int = -1) -> bytes:
        return self.text_stream.read(size).encode("utf-8", "replace")


def anomaly_json(found) -> dict | None:
    if found is None:
        return None
    return {"kind": found.kind, "signature": found.signature_id, "category": found.category,
            "fault_domain": found.fault_domain, "action": found.action, "nodes": list(found.nodes),
            "ranks": list(found.ranks), "evidence": [e.text for e in found.evidence],
            # Offline there is no NodeAddr to map an address to its node (the live detector has the job's):
            # the addresses the lines blame are given as they are (docs/log-ingest.md, "Which host a line blames").
            "addresses": list(found.addresses)}


def print_classification(name: str, found) -> None:
    """Log text is untrusted: everything taken from it is shown (control characters escaped, no markup)."""
    from rich.console import Console

    from .terminal import shown

    console = Console()
    if found is None:
        console.print(f"[bold]{shown(name)}[/bold]: [green]no failure found[/green]", soft_wrap=True)
        return
    console.print(f"[bold]{shown(name)}[/bold]: [red]{shown(found.category)}[/red] — {shown(found.summary)}",
                  soft_wrap=True)
    console.print(f"  fault domain {found.fault_domain}, action {found.action}, signature {found.signature_id}"
                  f"{' (only a symptom: nothing better explains it)' if found.cascade else ''}", soft_wrap=True)
    where = []
    if found.nodes:
        where.append("nodes " + ", ".join(found.nodes))
    if found.addresses:
        where.append("addresses " + ", ".join(found.addresses) + " (offline no address is mapped to its Slurm node: "
                     "the live detector maps it with the job's NodeAddr)")
    if found.ranks:
        ranks = ", ".join(map(str, found.ranks[:16])) + (" …" if len(found.ranks) > 16 else "")
        where.append(f"ranks {ranks}")
    if where:
        console.print("  " + shown("; ".join(where)), soft_wrap=True)
    for evidence in found.evidence:
        text = evidence.text if len(evidence.text) <= 200 else evidence.text[:200] + "…"
        console.print(f"  [dim]line {evidence.index + 1}:[/dim] {shown(text)}", soft_wrap=True, highlight=False)
