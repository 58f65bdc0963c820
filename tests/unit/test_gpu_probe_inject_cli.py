"""`relaunch inject` without a server: argument errors exit 2, an unreachable NATS exits 3; and the
probe's settings. The round trip to a probe is tests/integration/test_probe_inject.py."""

import pytest
from typer.testing import CliRunner

from relaunch.client import inject
from relaunch.common.settings import SettingsError, load_settings
from relaunch.gpu_probe.settings import ProbeSettings

NOWHERE = "nats://127.0.0.1:1"  # nothing listens on port 1


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setenv("RELAUNCH_NATS_URL", NOWHERE)
    monkeypatch.setenv("RELAUNCH_CLUSTER", "c1")
    runner = CliRunner()
    return lambda *args: runner.invoke(inject.app, list(args))


def test_every_fault_has_a_command(cli):
    out = cli("--help")
    assert out.exit_code == 0
    for command in ("xid", "ecc", "nvlink", "throttle", "gpu-lost", "clear"):
        assert command in out.output


@pytest.mark.parametrize("args", [
    ["xid", "--node", "node2"],                          # no code
    ["xid", "--node", "node2", "--code", "0"],           # not an XID
    ["ecc", "--node", "node2", "--gpu", "99"],           # no such GPU index
    ["throttle", "--node", "node2", "--reason", "tired"],
    ["clear"],                                           # no node
])
def test_bad_arguments_exit_2(cli, args):
    assert cli(*args).exit_code == 2


def test_a_node_name_that_cannot_be_a_subject_exits_2(cli):
    out = cli("xid", "--node", "node.2", "--code", "79")
    assert out.exit_code == 2 and "not a valid name" in out.output


def test_no_nats_exits_3_and_says_where_it_looked(cli):
    out = cli("xid", "--node", "node2", "--code", "79", "--timeout", "0.5")
    assert out.exit_code == 3 and NOWHERE in out.output


async def test_send_reads_the_cluster_from_the_environment(monkeypatch):
    monkeypatch.setenv("RELAUNCH_CLUSTER", "bad.cluster")
    code, message = await inject.send("clear", "node2", nats_url=NOWHERE)
    assert code == 2 and "cluster" in message


def test_probe_settings_refuse_unknown_keys_and_backends(monkeypatch):
    monkeypatch.setenv("RELAUNCH_PROBE_BACKEND", "nvml")
    assert load_settings(ProbeSettings).backend == "nvml"
    monkeypatch.setenv("RELAUNCH_PROBE_BACKEND", "dcgm")
    with pytest.raises(SettingsError):
        load_settings(ProbeSettings)
    monkeypatch.setenv("RELAUNCH_PROBE_BACKEND", "fake")
    monkeypatch.setenv("RELAUNCH_PROBE_INTERVAL", "5")
    with pytest.raises(SettingsError, match="RELAUNCH_PROBE_INTERVAL"):
        load_settings(ProbeSettings)


# -- which backend a probe runs (issue 35: the fake one obeys `relaunch inject`) ---------------------


def test_the_default_backend_is_nvml(monkeypatch):
    for name in ("RELAUNCH_PROBE_BACKEND", "RELAUNCH_PROBE_ALLOW_FAKE"):
        monkeypatch.delenv(name, raising=False)
    assert load_settings(ProbeSettings).backend == "nvml"


def test_the_fake_backend_needs_its_name_and_a_confirmation():
    from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
    from relaunch.gpu_probe.main import make_backend

    with pytest.raises(SettingsError, match="RELAUNCH_PROBE_ALLOW_FAKE=1") as refused:
        make_backend(ProbeSettings(backend="fake"))
    assert "relaunch inject" in str(refused.value)
    assert isinstance(make_backend(ProbeSettings(backend="fake", allow_fake=True)), FakeNvml)


def test_a_probe_told_only_backend_fake_exits_2_and_says_what_to_do():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAUNCH_")}
    env.update(RELAUNCH_PROBE_BACKEND="fake", RELAUNCH_NATS_URL=NOWHERE, RELAUNCH_CLUSTER="c1")
    out = subprocess.run([sys.executable, "-m", "relaunch.gpu_probe", "--node", "node1"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "RELAUNCH_PROBE_ALLOW_FAKE=1" in out.stderr and "Traceback" not in out.stderr
