"""Optional node drain on the real cluster: with RELAUNCH_ACTUATOR_DRAIN_NODES=true, a node excluded for a
confirmed hardware fault (XID 79 from gpu-probe) is drained with a reason that names relaunch and the
evidence, once; the node is resumed and the stack's usual actuator restored at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from slurmjobs import REPO, VENV_BIN, job_fields, ledger, sbatch, wait_until

from relaunch.actuator.domain.hostlists import expand

pytestmark = [pytest.mark.e2e, pytest.mark.rest_on_one_release]


def restart_actuator(env: dict, **extra: str) -> None:
    """Stop the stack's actuator gracefully (it hands back its lease) and start it again with `extra`."""
    pid_file = Path(env["RELAUNCH_RUN_DIR"]) / "pids" / "actuator.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGTERM)
    wait_until("the actuator to stop", lambda: not Path(f"/proc/{pid}").exists()
               or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], timeout=20)
    keep = {k: env[k] for k in ("RELAUNCH_RUN_DIR", "RELAUNCH_PORT_BASE", "RELAUNCH_CLUSTER")}
    subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), "services-up"], check=True, timeout=120,
                   env={**os.environ, **keep, "RELAUNCH_WATCHDOG_BOUND_S": "15", "RELAUNCH_WATCHDOG_INTERVAL_S": "1",
                        **extra})


def node_condition(node: str) -> tuple[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T|%E"], check=True, capture_output=True,
                         text=True).stdout.splitlines()[0]
    state, _, reason = out.partition("|")
    return state, reason


def test_hardware_fault_drains_the_node_with_a_reason_naming_relaunch(services, slurm_api):
    restart_actuator(services, RELAUNCH_ACTUATOR_DRAIN_NODES="true")
    bad = None
    try:
        job = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=2", "--nodes=2", STEP_SECONDS="2")
        fields = wait_until("the job to run on two nodes",
                            lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f, timeout=60)
        bad = expand(fields["NodeList"])[1]
        out = subprocess.run([str(VENV_BIN / "relaunch"), "inject", "xid", "--node", bad, "--code", "79"],
                             capture_output=True, text=True, env={**os.environ, **services}, timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        record = wait_until("the restart", lambda: (r := ledger(job)) and r["advice"]
                            and r["advice"][0]["status"] == "CONVERGED" and r, timeout=60)
        state, reason = node_condition(bad)
        assert "drain" in state, (state, reason)
        assert reason.startswith(f"relaunch: job {job} attempt 0: gpu-probe: failed"), reason
        drains = [a for a in record["audit"] if a["service"] == "actuator" and a["action"] == "drain"]
        assert len(drains) == 1 and f"NodeName={bad}" in drains[0]["detail"], record["audit"]
        assert bad in record["advice"][0]["exclude_nodes"]
        final = wait_until("the restarted attempt to complete",
                           lambda: (f := job_fields(job))["JobState"] in ("COMPLETED", "FAILED")
                           and f["Restarts"] == "1" and f, timeout=60)
        assert (final["JobState"], final["Restarts"]) == ("COMPLETED", "1"), final
        assert bad not in expand(final["NodeList"])
    finally:
        if bad is not None:
            subprocess.run(["scontrol", "update", f"NodeName={bad}", "State=RESUME"], capture_output=True, timeout=30)
            subprocess.run([str(VENV_BIN / "relaunch"), "inject", "clear", "--node", bad],
                           env={**os.environ, **services}, capture_output=True, timeout=30)
        restart_actuator(services)
        if bad is not None:
            wait_until(f"{bad} to be back in service", lambda: "drain" not in node_condition(bad)[0], timeout=30)
            time.sleep(0.5)
