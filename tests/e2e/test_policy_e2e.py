"""Policy and attribution end to end on real Slurm: an application error is never restarted, and a
NCCL network error that names a host restarts the job without that host."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from slurmjobs import job_fields, ledger, sbatch, wait_until

from relaunch.actuator.domain.hostlists import expand

pytestmark = pytest.mark.e2e
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_module_not_found_is_not_restarted_and_the_ledger_says_why(services):
    job = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=3", STEP_SECONDS="0.2",
                 CRASH_LINE="ModuleNotFoundError: No module named 'apex'")
    wait_until("the job to fail", lambda: job_fields(job)["JobState"] == "FAILED")
    record = wait_until("the decision", lambda: (r := ledger(job)) and r["job"]["verdict"] == "stopped" and r)
    assert record["anomalies"][0]["fault_domain"] == "application"
    assert "application" in record["job"]["verdict_reason"], record["job"]["verdict_reason"]
    assert record["advice"] == []
    time.sleep(3)
    assert job_fields(job)["Restarts"] == "0"


def test_a_nccl_error_naming_a_host_restarts_without_that_host(services):
    # The job fills in its last host as the peer (a line naming both ends of a two-node job names
    # the whole job, which attribution does not exclude).
    line = ("transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer {peer}<54331> with error 12, "
            "opcode 0, len 0, vendor err 129 (Recv)")
    job = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=2,exclude=on", "--nodes=2", STEP_SECONDS="1",
                 CRASH_LINE=line)
    first, peer = expand(wait_until("the job to run", lambda: (f := job_fields(job))["JobState"] == "RUNNING"
                                    and f)["NodeList"])
    record = wait_until("the restart", lambda: (r := ledger(job)) and r["advice"] and r["advice"][0]["status"] ==
                        "CONVERGED" and r, timeout=60)
    (advice,) = record["advice"]
    assert record["anomalies"][0]["signature_id"] == "nccl_ib_error"
    assert peer in advice["exclude_nodes"], advice
    ARTIFACTS.mkdir(exist_ok=True)  # an example Advice from a real run, as `relaunch jobs show --json` gives it
    (ARTIFACTS / "advice-nccl-host.json").write_text(json.dumps(advice, indent=1, default=str) + "\n")
    final = wait_until("the second attempt to complete",
                       lambda: (f := job_fields(job))["JobState"] == "COMPLETED" and f, timeout=60)
    assert final["Restarts"] == "1" and peer not in expand(final["NodeList"])
