"""The client reads the settings every service reads (CommonSettings): one default, written once."""

from pathlib import Path

from relaunch.client import settings as client_settings
from relaunch.common.settings import CommonSettings

CLIENT = Path(__file__).resolve().parents[2] / "libs/client/src/relaunch/client"


def test_without_environment_the_client_uses_the_common_defaults(monkeypatch):
    for name in ("RELAUNCH_NATS_URL", "RELAUNCH_API_URL", "RELAUNCH_CLUSTER", "SLURM_CLUSTER_NAME"):
        monkeypatch.delenv(name, raising=False)
    defaults = CommonSettings.model_fields
    assert client_settings.nats_url() == defaults["nats_url"].default
    assert client_settings.api_url() == defaults["api_url"].default.rstrip("/")
    assert client_settings.cluster() == client_settings.job_cluster() == defaults["cluster"].default


def test_the_environment_and_options_win_in_order(monkeypatch):
    monkeypatch.setenv("RELAUNCH_API_URL", "http://api.example:9/")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "slurm-name")
    assert client_settings.api_url() == "http://api.example:9"
    assert client_settings.job_cluster() == "slurm-name"
    monkeypatch.setenv("RELAUNCH_CLUSTER", "ours")
    assert client_settings.job_cluster() == client_settings.cluster() == "ours"
    assert client_settings.cluster("given") == "given"


def test_no_client_module_spells_a_default_of_its_own():
    defaults = [str(field.default) for name, field in CommonSettings.model_fields.items()
                if name in ("nats_url", "api_url", "database_url", "redis_url")]
    for path in CLIENT.glob("*.py"):
        text = path.read_text()
        assert not [d for d in defaults if d in text], f"{path.name} spells a CommonSettings default"
        for name in CommonSettings.model_fields:
            assert f'os.environ.get("RELAUNCH_{name.upper()}"' not in text, f"{path.name} reads {name} by hand"
