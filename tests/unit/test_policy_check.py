"""`relaunch policy check COMMENT [--policy-file F]` (contract name): the decider's diagnosis, offline.
Exit 0 valid, 2 invalid (the job would only be observed), 1 not opted in."""

import json

import pytest
from typer.testing import CliRunner

from relaunch.client.cli import app

RUNNER = CliRunner()


@pytest.fixture(autouse=True)
def no_operator_file(monkeypatch):
    monkeypatch.delenv("RELAUNCH_DECIDER_POLICY_FILE", raising=False)


def check(*args):
    return RUNNER.invoke(app, ["policy", "check", *args])


def test_a_valid_comment_prints_the_effective_policy():
    result = check("relaunch:policy=pretrain,max_attempts=5,straggler=on,exclude=on")
    assert result.exit_code == 0, result.output
    assert "mode: act" in result.stdout and '"policy": "pretrain"' in result.stdout
    assert '"max_attempts": 5' in result.stdout and '"straggler": true' in result.stdout


def test_an_invalid_comment_prints_every_error_and_exits_2():
    result = check("relaunch:max_attempts=lots,colour=blue")
    assert result.exit_code == 2
    assert "max_attempts must be an integer" in result.stdout and "unknown option 'colour'" in result.stdout
    assert "mode: observe-only" in result.stdout


def test_not_opted_in_exits_1():
    result = check("just a comment")
    assert result.exit_code == 1 and "not opted in" in result.stdout


def test_the_operator_file_decides_what_loosens(tmp_path, monkeypatch):
    path = tmp_path / "policies.toml"
    path.write_text('[policy.default]\nmax_attempts = 2\nstraggler = "off"\n')
    result = check("relaunch:max_attempts=3,straggler=on", "--policy-file", str(path), "--json")
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert out["mode"] == "observe-only" and out["policy_file"] == str(path) and out["grammar"] == 5
    assert [e.split(" loosens")[0] for e in out["errors"]] == ["max_attempts=3", "straggler=on"]
    monkeypatch.setenv("RELAUNCH_DECIDER_POLICY_FILE", str(path))  # the decider's own setting is honoured
    assert check("relaunch:max_attempts=2").exit_code == 0
    assert check("relaunch:max_attempts=3").exit_code == 2


def test_a_bad_policy_file_is_a_usage_error_naming_the_key(tmp_path):
    path = tmp_path / "policies.toml"
    path.write_text("[policy.default]\nmax_attempts = 0\n")
    result = check("relaunch", "--policy-file", str(path))
    assert result.exit_code == 2 and "policy.default.max_attempts" in result.output


def test_hostile_text_is_printed_as_text():
    result = check("relaunch:policy=[bold]x[/bold],max_attempts=$(reboot)")
    assert result.exit_code == 2 and "[bold]" in result.stdout and "$(reboot)" in result.stdout


def test_the_command_imports_no_service_package():
    """The policy file's schema and resolve() live in relaunch.common.policies, the decider's own
    code: the client gives the decider's answer without importing the decider."""
    import json
    import subprocess
    import sys
    probe = ("import sys; from relaunch.client.cli import main; "
             "sys.argv = ['relaunch', 'policy', 'check', '--json', 'relaunch:max_attempts=2']\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "services = ('detector', 'decider', 'actuator', 'gpu_probe', 'api')\n"
             "print(sorted(m for m in sys.modules if m.split('.')[:2] in [['relaunch', s] for s in services]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, imported = out.stdout.splitlines()
    assert json.loads(first)["effective"]["max_attempts"] == 2
    assert imported == "[]"


def test_a_space_after_the_colon_is_read_as_the_decider_reads_it():
    result = check("relaunch: max_attempts=1")
    assert result.exit_code == 0, result.output
    assert '"max_attempts": 1' in result.stdout
    result = check("relaunch: max_atempts=1")
    assert result.exit_code == 2 and "unknown option 'max_atempts'" in result.stdout
