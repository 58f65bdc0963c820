"""The hosts tier (docs/reliability.md, "Faults between hosts"): the test stack in the hosts topology,
each Slurm node and each of three NATS servers in a network namespace of its own (scripts/stack.sh,
RELAUNCH_TOPOLOGY=hosts, RELAUNCH_NATS_SERVERS=3), with
Slurm's default SlurmdTimeout (300 s), so that nothing here can pass by waiting for Slurm to notice.

scripts/test_matrix.py runs it once, with a run folder and ports of its own:
    RELAUNCH_TEST_RUN_DIR=.run/test-hosts RELAUNCH_TEST_PORT_BASE=27000 pytest tests/hosts
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ["RELAUNCH_TOPOLOGY"] = "hosts"
# NATS as a 3-server cluster, each server on a host of its own, streams and buckets R3 (test_nats_cluster.py;
# the lost-node and partition tests run over it too).
os.environ.setdefault("RELAUNCH_NATS_SERVERS", "3")
os.environ.setdefault("RELAUNCH_SLURMD_TIMEOUT", "300")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))  # slurmjobs
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))  # faults (the results table)


@pytest.fixture(autouse=True)
def repaired_nodes(request):
    """Each test starts on nodes with no record: every node's earlier exclusions cleared, as an operator does after
    a repair (`relaunch nodes clear`, docs/policy.md "Forgetting a repaired node"). The tests here cut, freeze and
    blame nodes on purpose, and with the lost-node evidence behind them those exclusions are node history
    ("Node history": weight >= 1.5 and corroborated) that rightly leaves a node out of every later job it fails in:
    the whole-rack cut, or the culprit tests, then saw one more node left out than the fault they made."""
    if "services" in request.fixturenames:
        import subprocess

        from slurmjobs import clear_node
        request.getfixturevalue("services")
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True).stdout
        for node in sorted(set(out.split())):
            clear_node(node, f"before {request.node.name}")
    yield


def pytest_collection_modifyitems(items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="the hosts topology needs root (ip netns, veth pairs)")
        for item in items:
            item.add_marker(skip)
