"""The Makefile's stack targets pass only the settings asked for: an empty RELAUNCH_SLURM_API reached the
services as an invalid setting, and `make up` / `make demo` failed at stream setup."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("extra", [[], ["SLURM=24.11", "SLURM_API=rest", "NATS_SERVERS=3"]])
def test_stack_targets_set_no_empty_relaunch_variable(extra):
    dry = subprocess.run(["make", "-n", "up", "demo", "bench", *extra], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    stack_lines = [line for line in dry.splitlines() if "scripts/stack.sh" in line]
    assert stack_lines
    for line in stack_lines:
        assert not re.search(r"\bRELAUNCH_[A-Z_]+=(\s|$)", line), line
    if extra:
        assert all("RELAUNCH_SLURM_API=rest" in line and "RELAUNCH_NATS_SERVERS=3" in line for line in stack_lines)
