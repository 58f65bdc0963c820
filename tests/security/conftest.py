"""Fixtures of the tier that attacks (docs/security.md, "Tests that attack"): the per-release test stack of
tests/conftest.py (session fixtures `test_stack` and `services`), a recorder of every message on the bus
for the session, and the stack's own paths and credentials."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))  # slurmjobs (no __init__.py)
sys.path.insert(0, str(Path(__file__).resolve().parent))  # attacks

from attacks import BusRecorder  # noqa: E402


@pytest.fixture(scope="session")
def bus(services):
    """Every message on `relaunch.>` from the first attack on, as the NATS admin user sees it (the canary
    searches read it: a secret that reached any subject is found here)."""
    recorder = BusRecorder(services).start()
    yield recorder
    recorder.stop()
