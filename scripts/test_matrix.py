"""`make test`: every tier of the suite, the independent ones side by side, each on a stack of its own.

The tiers: the unit, integration and deploy tiers once; the compose demo once (make demo-compose: deploy/compose
run in a private Docker engine); the faults between hosts once (tests/hosts, the hosts topology); the end-to-end,
reliability and security tiers on every Slurm release of the matrix (a release root is built first where it is
missing); the real-framework tier (tests/frameworks, its own venv) once, on the first release of the matrix.

    python scripts/test_matrix.py 22.05 24.11 26.05          # what make test runs
    python scripts/test_matrix.py --only-slurm-tiers 26.05   # one release's e2e, reliability and security tiers
    TEST_JOBS=1 python scripts/test_matrix.py 22.05          # one tier at a time

Most of the suite's time is spent waiting (on Slurm, on timers, on recoveries), so tiers run concurrently:
at most TEST_JOBS at once (default: from the machine's cores and memory, `default_jobs`). Each tier runs on
its own run directory and ports (TIER_STACKS), writes its whole output to test-artifacts/matrix/<tier>.log
and its results to <tier>.xml; a tier that fails has its log printed whole at the end, so a failure reads as
it would alone. Every tier runs even when another failed, so that the table at the end (also written to
test-artifacts/matrix/summary.md) shows each end-to-end test on each release, followed by the slowest tests
of the run. The exit status is non-zero when anything failed, or when a tier collected no tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "test-artifacts" / "matrix"
ONCE = ["tests/unit", "tests/integration", "tests/deploy"]
PER_RELEASE = ["tests/e2e", "tests/reliability", "tests/security"]
"""On every release, in one pytest session on the release's test stack: the security tier (tests that attack,
docs/security.md) reuses that stack and runs after the others."""
FRAMEWORKS = ["tests/frameworks"]
HOSTS = ["tests/hosts"]
"""Faults between hosts (docs/reliability.md): once, on the host's Slurm, in the hosts topology, beside the
other tiers. (Session 26 ran it alone, after the others, for failures that depended on the order of its tests:
their cause was node history, each test's exclusions leaving one more node out of the next test's job; each
test now starts on cleared nodes, tests/hosts/conftest.py.)"""
RUN = REPO / ".run"
TIER_STACKS = {
    # tier -> (run directory, port base): no two tiers share a stack, so they may run at the same time.
    # The release tiers keep tests/conftest.py's defaults (24000, 25000, 26000); compose uses 28400-28499.
    "once": (RUN / "test-once", "22000"),
    "hosts": (RUN / "test-hosts", "27000"),
    "frameworks": (RUN / "test-frameworks", "29000"),
}
EXPECTED_S = {"slurm": 780, "hosts": 560, "frameworks": 1000, "compose-demo": 180, "once": 160}
"""Rough wall time of each kind of tier on a busy 2-core machine (the notes of issue 38): the longest start
first, so that the last to finish is a short one."""
APART = {"hosts": ("frameworks",)}
"""Tiers never run at the same time, either way round. The frameworks tier trains on up to 16 CPU-bound ranks
(load 30 on 2 cores); beside it the hosts tier's timing targets (a lost host left out within 15 s, p95) failed
at 16.5 s and its waits for a repaired slurmd ran out (issue 38). The frameworks tier starts first (it is the
longest), the hosts tier when it has ended."""


@dataclass
class Tier:
    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    before: list[list[str]] = field(default_factory=list)  # commands that prepare the tier (a release root)
    junit: bool = True
    apart: tuple[str, ...] = ()  # tiers it never runs beside (APART)
    rc: int | None = None
    seconds: float = 0.0

    @property
    def log(self) -> Path:
        return OUT / f"{self.name}.log"

    def expected_s(self) -> int:
        return EXPECTED_S.get("slurm" if self.name.startswith("slurm-") else self.name, 300)


def pytest_tier(name: str, paths: list[str], env: dict[str, str], before: list[list[str]] | None = None) -> Tier:
    return Tier(name, [sys.executable, "-m", "pytest", *paths, f"--junitxml={OUT / (name + '.xml')}",
                       "-p", "no:cacheprovider"], env, before or [])


def stack_env(name: str) -> dict[str, str]:
    run_dir, ports = TIER_STACKS[name]
    return {"RELAUNCH_TEST_RUN_DIR": str(run_dir), "RELAUNCH_TEST_PORT_BASE": ports}


def tiers(releases: list[str], only_slurm: bool) -> list[Tier]:
    found: list[Tier] = []
    for release in releases:
        results = REPO / "test-artifacts" / "reliability" / release
        shutil.rmtree(results, ignore_errors=True)  # only this run's results (faults.py report)
        root = [] if release == "22.05" else [["bash", "scripts/slurm-root.sh", "build", release]]
        found.append(pytest_tier(f"slurm-{release}", PER_RELEASE,
                                 {"RELAUNCH_TEST_SLURM": release, "RELAUNCH_RELIABILITY_RESULTS": str(results),
                                  "RELAUNCH_TEST_RELEASES": " ".join(releases)}, root))
    if only_slurm:
        return found
    shutil.rmtree(REPO / "test-artifacts" / "reliability" / "hosts", ignore_errors=True)
    found.append(pytest_tier("hosts", HOSTS, stack_env("hosts")))
    first = releases[0]
    root = [] if first == "22.05" else [["bash", "scripts/slurm-root.sh", "build", first]]
    found.append(pytest_tier("frameworks", FRAMEWORKS, {"RELAUNCH_TEST_SLURM": first, **stack_env("frameworks")},
                             root + [["bash", "scripts/frameworks-venv.sh"]]))
    found.append(Tier("compose-demo", ["bash", "scripts/compose-demo.sh"], junit=False))
    found.append(pytest_tier("once", ONCE, stack_env("once")))
    return ordered(found)


def ordered(found: list[Tier]) -> list[Tier]:
    """The tiers in the order they start, each with the tiers it is kept apart from (APART, either way round)."""
    for tier in found:
        tier.apart = APART.get(tier.name, ()) + tuple(k for k, v in APART.items() if tier.name in v)
    return sorted(found, key=lambda t: -t.expected_s())


def run_all(todo: list[Tier], jobs: int, start: Callable[[Tier], Tier]) -> list[Tier]:
    """Runs the tiers, at most `jobs` at once, each the first in `todo`'s order that no running tier is kept
    apart from; returns them in the order they ended."""
    pending, running, ended = list(todo), set(), []
    changed = threading.Condition()

    def one(tier: Tier) -> None:
        try:
            start(tier)
        finally:
            with changed:
                running.discard(tier.name)
                ended.append(tier)
                changed.notify_all()

    with changed:
        while pending or running:
            ready = next((t for t in pending if not set(t.apart) & running), None)
            if ready is None or len(running) >= max(1, jobs):
                changed.wait()
                continue
            pending.remove(ready)
            running.add(ready.name)
            threading.Thread(target=one, args=(ready,), name=ready.name, daemon=True).start()
    return ended


def default_jobs() -> int:
    """Tiers at once: each holds a stack (NATS, Redis, PostgreSQL, slurmctld and slurmd's, the services: about
    1.5 GiB) and mostly waits, so a core carries more than one; with two CPU-bound neighbours on a 2-core machine
    several tiers share a core (README, "Two commands")."""
    cores = os.cpu_count() or 1
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = 8.0
    return max(1, min(cores + 1, int(mem_gib // 3), 4))


def run_tier(tier: Tier, lock: threading.Lock) -> Tier:
    started = time.monotonic()
    with lock:
        print(f"=== {tier.name}: started ({' '.join(tier.command[-6:] if tier.junit else tier.command)})", flush=True)
    with open(tier.log, "w") as out:
        rc = 0
        for step in tier.before:
            out.write(f"$ {' '.join(step)}\n")
            out.flush()
            rc = subprocess.call(step, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                out.write(f"preparing the tier failed (exit {rc})\n")
                break
        if rc == 0:
            out.write(f"$ {' '.join(tier.command)}\n")
            out.flush()
            rc = subprocess.call(tier.command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                 env={**os.environ, **tier.env})
    tier.seconds = time.monotonic() - started
    tier.rc = 1 if rc == 5 and tier.junit else rc  # "no tests collected" is a failure here
    with lock:
        print(f"=== {tier.name}: {'passed' if tier.rc == 0 else f'FAILED (exit {rc})'} after {tier.seconds:.0f} s",
              flush=True)
    return tier


def progress(running: dict[str, float], done: threading.Event, lock: threading.Lock, every_s: float = 60.0) -> None:
    while not done.wait(every_s):
        with lock:
            now = time.monotonic()
            names = ", ".join(f"{name} {(now - since) / 60:.0f} min" for name, since in sorted(running.items()))
            if names:
                print(f"--- still running: {names}", flush=True)


def outcomes(xml: Path) -> dict[str, tuple[str, float]]:
    """test id -> (passed | failed | skipped, seconds), from a JUnit file."""
    found: dict[str, tuple[str, float]] = {}
    if not xml.exists():
        return found
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        return found
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".removeprefix("tests.")
        kinds = {child.tag for child in case}
        state = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        found[name] = (state, float(case.get("time") or 0.0))
    return found


def summary(releases: list[str]) -> str:
    results = {v: {t: o[0] for t, o in outcomes(OUT / f"slurm-{v}.xml").items()} for v in releases}
    tests = sorted(set().union(*results.values()))
    mark = {"passed": "pass", "failed": "**FAIL**", "skipped": "skip", None: "-"}
    lines = ["| test | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
    lines += [f"| {t} | " + " | ".join(mark[results[v].get(t)] for v in releases) + " |" for t in tests]
    totals = [f"{v}: {sum(o == 'passed' for o in results[v].values())}/{len(results[v])} passed" for v in releases]
    return "\n".join(lines) + "\n\n" + "; ".join(totals) + "\n"


def slowest(ran: list[Tier], count: int = 20) -> str:
    timed = [(seconds, tier.name, test) for tier in ran if tier.junit
             for test, (_, seconds) in outcomes(OUT / f"{tier.name}.xml").items()]
    rows = [f"| {seconds:.1f} | {name} | {test} |" for seconds, name, test in sorted(timed, reverse=True)[:count]]
    return "\n".join([f"Slowest {len(rows)} tests:", "", "| s | tier | test |", "|---:|---|---|", *rows]) + "\n"


def compose_phases() -> str:
    log = OUT / "compose-demo.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(line.removeprefix("compose-demo: ").rstrip() for line in lines
                     if line.startswith("compose-demo: ") and line.rstrip().endswith(" s"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+", choices=["22.05", "24.11", "26.05"])
    parser.add_argument("--only-slurm-tiers", action="store_true", help="skip the tiers that run once")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS") or 0) or default_jobs(),
                        help="tiers at once (TEST_JOBS; default from the machine's cores and memory)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    todo = tiers(args.releases, args.only_slurm_tiers)
    print(f"=== {len(todo)} tiers, {args.jobs} at once (TEST_JOBS to change): {', '.join(t.name for t in todo)}",
          flush=True)
    lock, done = threading.Lock(), threading.Event()
    running: dict[str, float] = {}

    def tracked(tier: Tier) -> Tier:
        with lock:
            running[tier.name] = time.monotonic()
        try:
            return run_tier(tier, lock)
        finally:
            with lock:
                running.pop(tier.name, None)

    started = time.monotonic()
    watcher = threading.Thread(target=progress, args=(running, done, lock), daemon=True)
    watcher.start()
    ran = run_all(todo, args.jobs, tracked)
    done.set()
    failed = [t for t in ran if t.rc != 0]
    for tier in failed:
        print(f"\n=== {tier.name} FAILED: its whole output ({tier.log.relative_to(REPO)}) ===\n", flush=True)
        print(tier.log.read_text(errors="replace"), flush=True)
    table = summary(args.releases)
    compose = next((t for t in ran if t.name == "compose-demo"), None)
    if compose is not None:
        verdict = "passed" if compose.rc == 0 else f"**FAILED** (exit {compose.rc})"
        table += f"\nCompose demo (make demo-compose): {verdict}\n\n```\n{compose_phases()}\n```\n"
    times = "\n".join(f"| {t.name} | {'pass' if t.rc == 0 else '**FAIL**'} | {t.seconds:.0f} |" for t in ran)
    table += f"\n| tier | result | s |\n|---|---|---:|\n{times}\n\nWall clock: {time.monotonic() - started:.0f} s, " \
             f"{args.jobs} tiers at once\n\n" + slowest(ran)
    (OUT / "summary.md").write_text(table)
    print("\nEnd-to-end, reliability and security tests on each Slurm release:\n\n" + table)
    if failed:
        print(f"FAILED: {', '.join(t.name for t in failed)} (their output is printed above)", file=sys.stderr)
        return 1
    print("all tiers passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
