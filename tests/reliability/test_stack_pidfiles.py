"""The local stack keeps track of its Slurm daemons when their pid files go stale (scripts/stack.sh,
slurm_alive; docs/slurm-versions.md): on Slurm 23.11 and later `scontrol reconfigure` replaces slurmctld
and every slurmd with new processes, and one CI run found slurmctld's pid file naming a process that
was gone while the new one served the stack's port. infra-up must then find the running daemon again,
not start a second one on its busy port (which failed every later fault test of that run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from faults import stack  # slurmjobs.stack, through faults (which puts tests/e2e on the path)

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]


def _dead_pid() -> int:
    """A pid that names no running process (a child that exited and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_infra_up_finds_slurm_daemons_whose_pid_files_went_stale(services):
    pids = Path(services["RELAUNCH_RUN_DIR"]) / "pids"
    ctld, slurmd = pids / "slurmctld.pid", pids / "slurmd-node2.pid"
    running = {f: f.read_text().strip() for f in (ctld, slurmd)}
    try:
        ctld.write_text(f"{_dead_pid()}\n")  # stale: names a process that is gone
        slurmd.unlink()                       # lost
        stack(services, "infra-up")           # without slurm_alive: "port ... is already in use", exit 1
        assert {f: f.read_text().strip() for f in (ctld, slurmd)} == running
    finally:
        for f, pid in running.items():
            f.write_text(pid + "\n")
