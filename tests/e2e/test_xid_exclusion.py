"""gpu-probe evidence reaches the decision: XID 79 injected on a node of a running two-node job, the
job then crashes, and it is restarted without that node, the Advice naming the XID."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from slurmjobs import VENV_BIN, job_fields, ledger, sbatch, wait_until

from relaunch.actuator.domain.hostlists import expand

pytestmark = [pytest.mark.e2e, pytest.mark.rest_on_one_release]


def test_xid79_on_node2_restarts_the_job_without_node2(services, slurm_api):
    job = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=2", "--nodes=2", STEP_SECONDS="2")
    fields = wait_until("the job to run on two nodes", lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f)
    nodes = expand(fields["NodeList"])
    assert len(nodes) == 2
    bad = nodes[1]
    out = subprocess.run([str(VENV_BIN / "relaunch"), "inject", "xid", "--node", bad, "--code", "79"],
                         capture_output=True, text=True, env={**os.environ, **services}, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    record = wait_until("the restart", lambda: (r := ledger(job)) and r["advice"] and r["advice"][0]["status"] ==
                        "CONVERGED" and r, timeout=60)
    (advice,) = record["advice"]
    # The other node may be excluded too when its history across jobs implicates it (earlier tests
    # restarted several jobs without it); the injected node must be, with the XID as its evidence.
    assert bad in advice["exclude_nodes"]
    assert any("XID 79" in ref and bad in ref for ref in advice["evidence_refs"]), advice["evidence_refs"]
    # Evidence once: gpu-probe re-reads the XID at every heartbeat until it ages out; the Advice, its
    # refs, the API's resolved evidence and the CLI say it once, with a count and a time span.
    collapsed = re.compile(r"gpu-probe: failed: GPU \d+: XID 79 .*, seen (\d+)x \d\d:\d\d:\d\d(-\d\d:\d\d:\d\d)?$")
    assert advice["reason"].count("XID 79") == 1, advice["reason"]
    xid_refs = [ref for ref in advice["evidence_refs"] if ref.startswith(f"node:{bad}:") and "XID 79" in ref]
    assert len(xid_refs) == 1 and collapsed.search(xid_refs[0]), advice["evidence_refs"]
    (suspect,) = [s for s in advice["evidence"]["suspects"] if s["node"] == bad]
    xid_reasons = [r for r in suspect["reasons"] if "XID 79" in r]
    assert len(xid_reasons) == 1 and collapsed.search(xid_reasons[0]), suspect
    shown = subprocess.run([str(VENV_BIN / "relaunch"), "jobs", "show", job], capture_output=True, text=True,
                           env={**os.environ, **services, "COLUMNS": "400"}, timeout=30)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"evidence {bad} (0.90): {xid_reasons[0]}" in shown.stdout, shown.stdout
    final = wait_until("the second attempt to complete",
                       lambda: (f := job_fields(job))["JobState"] == "COMPLETED" and f, timeout=60)
    assert final["Restarts"] == "1" and bad not in expand(final["NodeList"]) and bad in final["ExcNodeList"]
    subprocess.run([str(VENV_BIN / "relaunch"), "inject", "clear", "--node", bad], env={**os.environ, **services},
                   capture_output=True, timeout=30)
    time.sleep(0.5)
