"""`relaunch nodes` and `relaunch jobs mode` against the real API app over in-memory backends."""

from __future__ import annotations

import json

import pytest
from test_api_fakes import Fakes, client
from rich.console import Console
from typer.testing import CliRunner

from relaunch.client import operator_cli
from relaunch.client.cli import app

TOKEN = "cli-test-token-0123456789abcdef"


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    fakes = Fakes()
    with client(fakes, tmp_path, token=TOKEN) as api:
        monkeypatch.setattr(operator_cli, "_client", lambda: _Unclosable(api))
        monkeypatch.setattr(operator_cli, "console", Console(width=200))  # no truncated table cells
        monkeypatch.delenv("RELAUNCH_API_TOKEN_FILE", raising=False)
        monkeypatch.setenv("RELAUNCH_CLUSTER", "local")
        yield fakes


class _Unclosable:
    """The CLI closes its client after each call; the TestClient must outlive that."""

    def __init__(self, api) -> None:
        self.api = api

    def __enter__(self):
        return self.api

    def __exit__(self, *exc) -> None:
        pass


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_nodes_lists_health_history_and_exclusions(fakes):
    result = run("nodes")
    assert result.exit_code == 0, result.output
    assert "node1" in result.output and "failed" in result.output and "101 (gen 1)" in result.output
    data = json.loads(run("nodes", "--json", "--history", "1").output)
    assert {n["node"] for n in data["nodes"]} == {"node1", "node2"}
    assert fakes.ledger.calls[-1] == ("nodes", {"cluster": None, "history": 1})


def test_jobs_mode_sends_the_token_from_the_file_and_reports_the_override(fakes, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    result = run("jobs", "mode", "101", "observe", "--reason", "canary rollout", "--actor", "ana",
                 "--token-file", str(token_file))
    assert result.exit_code == 0, result.output
    assert "override observe recorded" in result.output.replace("\n", " ")
    assert fakes.overrides.recorded[0]["reason"] == "canary rollout"


@pytest.mark.parametrize("args, code, words", [
    (("jobs", "mode", "101", "observe"), 2, "--token-file"),                 # no token file at all
    (("jobs", "mode", "101", "sideways", "--token-file", "x"), 2, "observe or act"),
    (("jobs", "mode", "999", "act", "--token-file", "GOOD"), 1, "not in the ledger"),
    (("jobs", "mode", "101", "act", "--token-file", "BAD"), 2, "not the one"),
])
def test_jobs_mode_exit_codes_scripts_can_rely_on(fakes, tmp_path, args, code, words):
    (tmp_path / "good").write_text(TOKEN)
    (tmp_path / "bad").write_text("a-wrong-token-of-enough-length")
    args = tuple({"GOOD": str(tmp_path / "good"), "BAD": str(tmp_path / "bad")}.get(a, a) for a in args)
    result = run(*args)
    assert result.exit_code == code, result.output
    assert words in result.output.replace("\n", " ")
    assert fakes.overrides.recorded == []


def test_nodes_clear_needs_the_token_and_records_who_and_why(fakes, tmp_path):
    assert run("nodes", "clear", "node1").exit_code == 2  # no token file: refused before any call
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-0123456789\n")
    assert run("nodes", "clear", "node1", "--token-file", str(wrong)).exit_code == 2
    assert fakes.overrides.cleared == []
    good = tmp_path / "api-token"
    result = run("nodes", "clear", "node1", "--token-file", str(good), "--reason", "GPU 2 reseated", "--actor", "ana")
    assert result.exit_code == 0, result.output
    assert "record cleared" in result.output and "1 jobs' exclusions forgotten" in result.output
    assert [(c["node"], c["reason"], c["actor"]) for c in fakes.overrides.cleared] == [
        ("node1", "GPU 2 reseated", "ana")]
    # A node the ledger never heard of is a 404 (exit 1), not a silent success.
    assert run("nodes", "clear", "nodeX", "--token-file", str(good)).exit_code == 1


def test_nodes_still_lists_without_a_subcommand(fakes):
    result = run("nodes", "--history", "2")
    assert result.exit_code == 0, result.output
    assert "node1" in result.output and "cleared" in result.output


def test_nodes_clear_without_user_records_the_uids_name(fakes, tmp_path, monkeypatch):
    import os
    import pwd

    monkeypatch.delenv("USER", raising=False)  # cron, a container: issue 40 recorded ''
    result = run("nodes", "clear", "node1", "--token-file", str(tmp_path / "api-token"), "--reason", "reseated")
    assert result.exit_code == 0, result.output
    assert fakes.overrides.cleared[-1]["actor"] == pwd.getpwuid(os.getuid()).pw_name != ""


def test_who_falls_back_to_the_uid(monkeypatch):
    import os
    import pwd

    monkeypatch.setenv("USER", "ana")
    assert operator_cli.who() == "ana"
    monkeypatch.delenv("USER")

    def unknown(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", unknown)
    assert operator_cli.who() == f"uid {os.getuid()}"
