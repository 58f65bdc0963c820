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


HOSTILE = "[bold red]x[/]\x1b]0;PWNED\x07\x1b[2J"
"""A job name that retitles the terminal, clears it, and would be rich markup if read as such."""


def hostile_job() -> dict:
    evidence = [{"path": f"/jobs/{HOSTILE}.out", "offset": 7, "text": f"boom {HOSTILE}\r\x1b[2K"}]
    return {**JOB, "job": {**JOB["job"], "name": HOSTILE, "verdict_reason": HOSTILE, "comment": HOSTILE},
            "attempts": [{"index": 0, "state": "FAILED", "nodes": ["node1"], "exit_code": 1}],
            "anomalies": [{"attempt": 0, "category": "crash", "fault_domain": "application", "action": "stop",
                           "summary": HOSTILE, "evidence": evidence}],
            "audit": [{**JOB["audit"][0], "detail": HOSTILE}]}


def test_jobs_show_prints_a_jobs_text_escaped_and_never_as_markup(monkeypatch):
    from rich.console import Console

    monkeypatch.setattr(cli, "_get", lambda path: hostile_job())
    monkeypatch.setattr(cli, "console", Console(width=400))  # no wrapping inside the strings compared
    result = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"])
    assert result.exit_code == 0, result.output
    out = result.stdout_bytes
    assert b"\x1b" not in out and b"\x07" not in out and b"\r" not in out
    shown = r"[bold red]x[/]\x1b]0;PWNED\x07\x1b[2J".encode()
    assert out.count(shown) == 6, out  # name, why, anomaly summary, evidence path and line, audit detail


def test_on_a_terminal_only_relaunchs_own_styles_are_escape_sequences(monkeypatch):
    from rich.console import Console

    monkeypatch.setattr(cli, "_get", lambda path: hostile_job())
    monkeypatch.setattr(cli, "console", Console(force_terminal=True, width=300, color_system="standard"))
    out = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"]).stdout_bytes
    assert b"\x1b]" not in out and b"\x07" not in out and b"\x1b[2J" not in out
    assert b"\x1b[1;31m" not in out, "the job's [bold red] was not turned into a style"
    assert b"[bold red]x[/]" in out


def test_jobs_list_cells_are_text_not_markup(monkeypatch):
    rows = {"jobs": [{**JOB["job"], "name": HOSTILE, "verdict_reason": HOSTILE, "attempt_count": 1}]}
    monkeypatch.setattr(cli, "_get", lambda path, params=None: rows)
    from rich.console import Console

    monkeypatch.setattr(cli, "console", Console(width=400))
    out = CliRunner().invoke(cli.app, ["jobs"]).stdout_bytes
    assert b"\x1b" not in out and b"\x07" not in out and b"[bold red]x[/]" in out


def test_jobs_list_says_each_outcome_in_words_within_80_columns(monkeypatch):
    long = "stopped: ModuleNotFoundError in train.py after 2 restarts, and more words that wrap within the column"
    rows = {"jobs": [{**JOB["job"], "job_id": "7", "state": "COMPLETED", "verdict": "watching", "restarts": 0,
                      "attempt_count": 1, "name": "a-very-long-training-run-name"},
                     {**JOB["job"], "job_id": "8", "attempt_count": 3, "outcome": long}]}
    monkeypatch.setattr(cli, "_get", lambda path, params=None: rows)
    out = CliRunner().invoke(cli.app, ["jobs"], env={"COLUMNS": "200"}).output
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    assert any(" completed" in line for line in lines if line.lstrip().startswith("7")), out  # not "watching"
    assert "watching" not in out
    assert " ".join(" ".join(lines).split()).count("more words that wrap within the column") == 1, out


def test_jobs_show_leads_with_the_outcome_and_says_the_mode_in_force(monkeypatch):
    job = {**JOB["job"], "mode": "act", "mode_override": "observe", "outcome": "running (observe-only)"}
    monkeypatch.setattr(cli, "_get", lambda path: {**JOB, "job": job})
    out = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"]).output
    assert out.splitlines()[0].endswith("flaky: running (observe-only)"), out
    assert "mode=observe (operator override observe; the comment says act)" in out
    monkeypatch.setattr(cli, "_get", lambda path: {**JOB, "job": {**job, "mode_override": None}})
    assert "mode=act" in CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"]).output


def test_jobs_show_says_what_was_really_excluded_in_words(monkeypatch):
    advice = {"generation": 1, "operation": "restart", "exclude_nodes": ["node2"], "status": "CONVERGED",
              "status_reason": "desired state observed", "reason": "", "reconcile": [], "evidence": {},
              "exclusion_words": "restart; node2 kept: the job requires it (sbatch -w), so it was not excluded"}
    monkeypatch.setattr(cli, "_get", lambda path: {**JOB, "advice": [advice], "audit": []})
    out = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"]).output
    assert "advice gen 1: restart; node2 kept: the job requires it" in out and "['node2']" not in out
    monkeypatch.setattr(cli, "_get", lambda path: {**JOB, "advice": [{**advice, "exclusion_words": None}],
                                                   "audit": []})  # an API from before issue 40
    out = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"]).output
    assert "advice gen 1: restart without node2" in out and "['node2']" not in out
