"""The code passes the agreed lint rules (pyproject.toml [tool.ruff]): pyflakes' findings (an undefined name, an
unused import or variable) are bugs or dead code; a finding fails this test with ruff's report."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: run make setup (requirements-dev.txt installs it)")
    out = subprocess.run([found, "check", "--no-cache", "libs", "services", "tests", "scripts", "bench", "examples"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"ruff found something:\n{out.stdout[-6000:]}\n{out.stderr[-2000:]}"
