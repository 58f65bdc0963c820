"""The real-framework tier: real, tiny trainings (torch CPU, transformers, Lightning, torchrun DDP on
gloo) on the test stack's Slurm cluster with every relaunch service running (tests/conftest.py), in
the tier's own venv (scripts/frameworks-venv.sh, cached outside the checkout)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # slurmjobs: job_fields, ledger, wait_until


@pytest.fixture(scope="session")
def frameworks_python() -> str:
    out = subprocess.run(["bash", str(REPO / "scripts" / "frameworks-venv.sh")], check=True, capture_output=True,
                         text=True, timeout=1800)
    return out.stdout.strip().splitlines()[-1]
