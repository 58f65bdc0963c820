"""Every service of the stack starts, connects and answers its health check."""

import json
import os
import urllib.request

import pytest

pytestmark = pytest.mark.e2e
BASE = int(os.environ.get("RELAUNCH_TEST_PORT_BASE", "24000"))  # the test stack (conftest.py); offsets as in scripts/stack.sh


@pytest.mark.parametrize("name,port", [
    ("detector", BASE + 91), ("decider", BASE + 92), ("actuator", BASE + 93),
    ("gpu-probe-node1", BASE + 94), ("gpu-probe-node4", BASE + 97), ("api", BASE + 80),
], ids=["detector", "decider", "actuator", "gpu-probe-node1", "gpu-probe-node4", "api"])  # same ids on every release
def test_service_is_healthy(services, name, port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
        body = json.load(resp)
    assert resp.status == 200 and body["ok"] is True and all(body["checks"].values())


def test_metrics_are_exposed(services):
    with urllib.request.urlopen(f"http://127.0.0.1:{BASE + 93}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert "relaunch_messages_consumed_total" in text or "relaunch_jobs_observed_total" in text
