"""Which GPU backend each deployment's gpu-probe runs (issue 35): NVML wherever GPUs are real (the Helm
chart, the head-node/systemd install, the service's own default); the fake backend, which obeys
`relaunch inject`, only where it is asked for by name and confirmed (the local stack, the compose
demo), and the service refuses it otherwise."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_checks import DEPLOY, REPO
from test_deploy_helm import env_of, helm, one, render
from test_deploy_systemd import ENV_FILE, parse_env_file

from relaunch.common.settings import SettingsError
from relaunch.gpu_probe.main import check_backend
from relaunch.gpu_probe.settings import ProbeSettings


def probe_settings(env: dict[str, str]) -> ProbeSettings:
    """ProbeSettings as the probe would read them from `env` (its RELAUNCH_PROBE_* keys)."""
    fields = {k.removeprefix("RELAUNCH_PROBE_").lower(): v for k, v in env.items() if k.startswith("RELAUNCH_PROBE_")}
    fields.pop("health_port", None)
    fields.pop("node", None)
    return ProbeSettings(**fields)


def test_the_services_default_is_nvml_and_fake_alone_is_refused():
    assert ProbeSettings().backend == "nvml"
    with pytest.raises(SettingsError, match="RELAUNCH_PROBE_ALLOW_FAKE=1"):
        check_backend(ProbeSettings(backend="fake"))
    check_backend(ProbeSettings(backend="fake", allow_fake=True))


def test_the_helm_chart_runs_nvml_and_its_schema_refuses_fake():
    container = one(render({}), "DaemonSet", "relaunch-gpu-probe")["spec"]["template"]["spec"]["containers"][0]
    env = {name: e.get("value") for name, e in env_of(container).items()}
    assert env["RELAUNCH_PROBE_BACKEND"] == "nvml" and "RELAUNCH_PROBE_ALLOW_FAKE" not in env
    assert probe_settings(env).backend == "nvml"
    with pytest.raises(helm.HelmValuesError, match="backend"):
        render({"gpuProbe": {"settings": {"backend": "fake"}}})
    with pytest.raises(helm.HelmValuesError, match="allow_fake"):
        render({"gpuProbe": {"settings": {"allow_fake": True}}})
    values = (DEPLOY / "helm" / "relaunch" / "values.yaml").read_text()
    assert "once the nvml backend exists" not in values and "backend: fake" not in values


def test_the_head_node_install_runs_nvml():
    env = parse_env_file(ENV_FILE)
    assert env["RELAUNCH_PROBE_BACKEND"] == "nvml" and "RELAUNCH_PROBE_ALLOW_FAKE" not in env
    assert "RELAUNCH_PROBE_ALLOW_FAKE" not in parse_env_file(ENV_FILE, include_commented=True)


class ComposeLoader(yaml.SafeLoader):
    """Reads Compose's `!reset` (compose.ci.yaml) as the marker RESET, so a reset is seen, not lost."""


RESET = "!reset"
ComposeLoader.add_constructor("!reset", lambda loader, node: RESET)


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_the_compose_demo_asks_for_fake_by_name_and_confirms_it(node):
    """Its Slurm nodes are containers without GPUs; the CI override (compose.ci.yaml, whose environment
    Compose merges key by key) neither resets nor changes either key."""
    for name in ("compose.yaml", "compose.ci.yaml"):
        service = yaml.load((DEPLOY / "compose" / name).read_text(), Loader=ComposeLoader)["services"][
            f"gpu-probe-{node}"]
        env = service.get("environment") or {}
        assert env != RESET, f"{name} resets the probe's environment"
        assert env.get("RELAUNCH_PROBE_BACKEND", "fake") == "fake" and \
            str(env.get("RELAUNCH_PROBE_ALLOW_FAKE", "1")) == "1", name
    env = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())["services"][f"gpu-probe-{node}"][
        "environment"]
    check_backend(probe_settings(env))  # starts: no refusal


def test_the_local_stack_asks_for_fake_by_name_and_confirms_it_and_injects_as_operator():
    stack = "".join(p.read_text() for p in [REPO / "scripts" / "stack.sh", *sorted((REPO / "scripts" / "stack").glob("*.sh"))])
    start = re.search(r"RELAUNCH_PROBE_BACKEND=fake RELAUNCH_PROBE_ALLOW_FAKE=1 \\\n\s+start_service \"gpu-probe-", stack)
    assert start, "scripts/stack.sh starts each probe with the fake backend, named and confirmed"
    assert "export RELAUNCH_INJECT_NATS_PASSWORD_FILE=$RUN/creds/operator.pass" in stack
