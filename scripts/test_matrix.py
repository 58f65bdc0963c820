"""`make test`: the unit, integration and deploy tiers once, the compose demo once (make demo-compose:
deploy/compose run in a private Docker engine), the faults between hosts once (tests/hosts, the hosts
topology), then the end-to-end, reliability and security tiers on every
Slurm release of the matrix, each on a test stack of its own (tests/conftest.py), then the
real-framework tier (tests/frameworks: real trainings in a venv of its own, scripts/frameworks-venv.sh)
once, on the first release of the matrix.

    python scripts/test_matrix.py 22.05 24.11 26.05          # what make test runs
    python scripts/test_matrix.py --only-slurm-tiers 26.05   # one release's e2e, reliability and security tiers

Every tier runs even when an earlier one failed, so that the table at the end (also written to
test-artifacts/matrix/summary.md) shows each end-to-end test on each release; the exit status is
non-zero when anything failed, or when a tier collected no tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "test-artifacts" / "matrix"
ONCE = ["tests/unit", "tests/integration", "tests/deploy"]
PER_RELEASE = ["tests/e2e", "tests/reliability", "tests/security"]
"""On every release, in one pytest session on the release's test stack: the security tier (tests that attack,
docs/security.md) reuses that stack and runs after the others."""
FRAMEWORKS = ["tests/frameworks"]
HOSTS = ["tests/hosts"]
"""Faults between hosts (docs/reliability.md): once, on the host's Slurm, in the hosts topology."""
HOSTS_ENV = {"RELAUNCH_TEST_RUN_DIR": str(REPO / ".run" / "test-hosts"), "RELAUNCH_TEST_PORT_BASE": "27000"}


def pytest(name: str, paths: list[str], env: dict[str, str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"\n=== {name}: pytest {' '.join(paths)}", flush=True)
    rc = subprocess.call([sys.executable, "-m", "pytest", *paths, f"--junitxml={OUT / (name + '.xml')}"],
                         cwd=REPO, env={**os.environ, **env})
    print(f"=== {name}: exit {rc} after {time.monotonic() - started:.0f} s", flush=True)
    return 1 if rc == 5 else rc  # "no tests collected" is a failure here


def compose_demo() -> tuple[int, str]:
    """scripts/compose-demo.sh (make demo-compose); returns its exit status and its phase timings."""
    started = time.monotonic()
    print("\n=== compose-demo: scripts/compose-demo.sh", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / "compose-demo.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "scripts/compose-demo.sh"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            out.write(line)
        rc = proc.wait()
    phases = [line.removeprefix("compose-demo: ").rstrip() for line in log.read_text().splitlines()
              if line.startswith("compose-demo: ") and line.rstrip().endswith(" s")]
    print(f"=== compose-demo: exit {rc} after {time.monotonic() - started:.0f} s", flush=True)
    return rc, "\n".join(phases)


def outcomes(xml: Path) -> dict[str, str]:
    """test id -> passed | failed | skipped, from a JUnit file."""
    found: dict[str, str] = {}
    if not xml.exists():
        return found
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".removeprefix("tests.")
        kinds = {child.tag for child in case}
        found[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return found


def summary(releases: list[str]) -> str:
    results = {v: outcomes(OUT / f"slurm-{v}.xml") for v in releases}
    tests = sorted(set().union(*results.values()))
    mark = {"passed": "pass", "failed": "**FAIL**", "skipped": "skip", None: "-"}
    lines = ["| test | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
    lines += [f"| {t} | " + " | ".join(mark[results[v].get(t)] for v in releases) + " |" for t in tests]
    totals = [f"{v}: {sum(o == 'passed' for o in results[v].values())}/{len(results[v])} passed" for v in releases]
    return "\n".join(lines) + "\n\n" + "; ".join(totals) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="+", choices=["22.05", "24.11", "26.05"])
    parser.add_argument("--only-slurm-tiers", action="store_true", help="skip the tiers that run once")
    args = parser.parse_args()
    failed: list[str] = []
    compose = None
    if not args.only_slurm_tiers:
        if pytest("once", ONCE, {}) != 0:
            failed.append("unit/integration/deploy")
        compose = compose_demo()
        if compose[0] != 0:
            failed.append("compose demo")
        shutil.rmtree(REPO / "test-artifacts" / "reliability" / "hosts", ignore_errors=True)
        if pytest("hosts", HOSTS, HOSTS_ENV) != 0:
            failed.append("faults between hosts")
    for release in args.releases:
        results = REPO / "test-artifacts" / "reliability" / release
        shutil.rmtree(results, ignore_errors=True)  # only this run's results (faults.py report)
        env = {"RELAUNCH_TEST_SLURM": release, "RELAUNCH_RELIABILITY_RESULTS": str(results)}
        if pytest(f"slurm-{release}", PER_RELEASE, env) != 0:
            failed.append(f"Slurm {release}")
    if not args.only_slurm_tiers:
        if pytest("frameworks", FRAMEWORKS, {"RELAUNCH_TEST_SLURM": args.releases[0]}) != 0:
            failed.append(f"real frameworks (Slurm {args.releases[0]})")
    table = summary(args.releases)
    if compose is not None:
        verdict = "passed" if compose[0] == 0 else f"**FAILED** (exit {compose[0]})"
        table += f"\nCompose demo (make demo-compose): {verdict}\n\n```\n{compose[1]}\n```\n"
    (OUT / "summary.md").write_text(table)
    print("\nEnd-to-end, reliability and security tests on each Slurm release:\n\n" + table)
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("all tiers passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
