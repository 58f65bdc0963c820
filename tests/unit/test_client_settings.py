"""The client reads the settings every service reads (CommonSettings), one way; a backend URL has no
default, and a command that needs one says which variable to set."""

import subprocess
import sys
from pathlib import Path

import pytest

from relaunch.client import progress
from relaunch.client import settings as client_settings
from relaunch.common.settings import CommonSettings, NotSet

CLI = "import sys; from relaunch.client.cli import main; sys.argv[0] = 'relaunch'; main()"
CLIENT = Path(__file__).resolve().parents[2] / "libs/client/src/relaunch/client"


def test_without_environment_a_backend_url_is_not_guessed_and_the_error_says_what_to_set(monkeypatch):
    for name in ("RELAUNCH_NATS_URL", "RELAUNCH_API_URL", "RELAUNCH_CLUSTER", "SLURM_CLUSTER_NAME"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(NotSet, match="RELAUNCH_NATS_URL is not set: give it the NATS server.*source .run/env"):
        client_settings.nats_url()
    with pytest.raises(NotSet, match="RELAUNCH_API_URL is not set: give it the relaunch API"):
        client_settings.api_url()
    monkeypatch.setenv("RELAUNCH_API_URL", "   ")
    with pytest.raises(NotSet):
        client_settings.api_url()
    defaults = CommonSettings.model_fields
    assert client_settings.cluster() == client_settings.job_cluster() == defaults["cluster"].default
    for name in ("nats_url", "api_url", "database_url", "redis_url"):
        assert defaults[name].default == "", name


def test_the_cli_names_the_missing_variable_and_exits_2_without_a_traceback(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for argv in (["jobs"], ["events", "tail"]):
        done = subprocess.run([sys.executable, "-c", CLI, *argv], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        which = "RELAUNCH_API_URL" if argv == ["jobs"] else "RELAUNCH_NATS_URL"
        assert f"{which} is not set" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_progress_in_a_job_without_a_nats_url_is_said_once_and_never_raised(monkeypatch, capsys):
    monkeypatch.delenv("RELAUNCH_NATS_URL", raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setattr(progress, "_default", None)
    monkeypatch.setattr(progress, "_unset", False)
    for step in range(5):
        progress.report_progress(step)
    said = capsys.readouterr().err
    assert said.count("relaunch: progress is not reported: RELAUNCH_NATS_URL is not set") == 1, said
    assert progress._default is None


def test_the_environment_and_options_win_in_order(monkeypatch):
    monkeypatch.setenv("RELAUNCH_API_URL", "http://api.example:9/")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "slurm-name")
    assert client_settings.api_url() == "http://api.example:9"
    assert client_settings.job_cluster() == "slurm-name"
    monkeypatch.setenv("RELAUNCH_CLUSTER", "ours")
    assert client_settings.job_cluster() == client_settings.cluster() == "ours"
    assert client_settings.cluster("given") == "given"


def test_no_client_module_spells_a_default_of_its_own():
    local_stack = ("127.0.0.1:14222", "127.0.0.1:14080", "127.0.0.1:14432", "127.0.0.1:14379")
    for path in CLIENT.glob("*.py"):
        text = path.read_text()
        assert not [d for d in local_stack if d in text], f"{path.name} spells a local stack URL"
        for name in CommonSettings.model_fields:
            assert f'os.environ.get("RELAUNCH_{name.upper()}"' not in text, f"{path.name} reads {name} by hand"
