"""`relaunch jobs show JOBID` prints the audit trail in its text form, not only with --json."""

from __future__ import annotations

from typer.testing import CliRunner

from relaunch.client import cli

JOB = {
    "job": {"job_id": "7", "cluster": "demo", "name": "flaky", "state": "RUNNING", "verdict": "restarting",
            "verdict_reason": ""},
    "attempts": [], "anomalies": [], "advice": [],
    "audit": [
        {"service": "actuator", "action": "observe: would run", "detail": "scontrol requeuehold 7 [node1]",
         "idempotency_key": "k1", "at": "2026-12-01T08:00:01.250000+00:00"},
        {"service": "decider", "action": "decided", "detail": "restart", "idempotency_key": "k2",
         "at": "2026-12-01T08:00:01.000000+00:00"},
    ],
}


def test_jobs_show_prints_every_audit_entry_observe_modes_commands_included(monkeypatch):
    monkeypatch.setattr(cli, "_get", lambda path: JOB)
    result = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"])
    assert result.exit_code == 0, result.output
    assert "audit:" in result.output
    assert "actuator  observe: would run: scontrol requeuehold 7 [node1]" in result.output
    assert "decider   decided: restart" in result.output


def test_jobs_show_prints_the_advice_reason_and_each_fault_once(monkeypatch):
    reason = "gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 6x 05:45:34-05:46:24"
    advice = {"generation": 1, "operation": "restart", "exclude_nodes": ["node3"], "status": "CONVERGED",
              "status_reason": "", "reason": f"segfault: s; restarting; without node3: {reason}", "reconcile": [],
              "evidence": {"anomalies": [], "other": [],
                           "suspects": [{"node": "node3", "confidence": 0.9, "reasons": [reason]}]}}
    monkeypatch.setattr(cli, "_get", lambda path: {**JOB, "advice": [advice], "audit": []})
    result = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"])
    assert result.exit_code == 0, result.output
    assert f"evidence node3 (0.90): {reason}" in result.output
    assert result.output.count("XID 79") == 2  # once in the reason, once as evidence
