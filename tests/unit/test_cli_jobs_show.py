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
