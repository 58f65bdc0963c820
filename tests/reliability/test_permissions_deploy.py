"""Least privilege in the Helm chart: with natsAuth set, every relaunch pod connects as its own NATS
user with only its own password mounted as a file from the Secret (never an environment value), the
streams come from an admin hook Job, and natsTls mounts the CA (and client pair) for TLS."""

from __future__ import annotations

from pathlib import Path

import helm_python as helm
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "relaunch"
VALUES = {"natsAuth": {"existingSecret": "nats-users"},
          "natsTls": {"existingSecret": "nats-tls", "clientCert": True},
          "watchdog": {"enabled": True, "command": ["python", "-m", "relaunch.actuator.watchdog"]}}
USERS = {"detector": "detector", "decider": "decider", "actuator": "actuator", "watchdog": "watchdog",
         "api": "api", "notifier": "notifier", "gpu-probe": "gpu-probe", "nats-setup": "admin"}


def render(values: dict) -> list[dict]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name="relaunch", namespace="relaunch-system")
    return [doc for path, text in sorted(manifests.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def pods(objects):
    for o in objects:
        if o["kind"] in ("Deployment", "DaemonSet", "Job"):
            yield o["metadata"]["labels"]["app.kubernetes.io/component"], o["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def objects():
    return render(VALUES)


def test_every_pod_connects_as_its_own_user_with_only_its_own_password_file(objects):
    seen = set()
    for component, spec in pods(objects):
        user = USERS[component]
        container = spec["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert env["RELAUNCH_NATS_USER"]["value"] == user
        assert env["RELAUNCH_NATS_PASSWORD_FILE"]["value"] == "/var/run/secrets/relaunch/nats/password"
        assert not any("PASSWORD" in name and "FILE" not in name for name in env)
        volume = next(v for v in spec["volumes"] if v["name"] == "nats-credentials")
        assert volume["secret"]["secretName"] == "nats-users"
        assert volume["secret"]["items"] == [{"key": f"{user}.pass", "path": "password"}], "its own key only"
        assert volume["secret"]["defaultMode"] == 0o400
        mount = next(m for m in container["volumeMounts"] if m["name"] == "nats-credentials")
        assert mount["readOnly"] and mount["mountPath"] == "/var/run/secrets/relaunch/nats"
        assert env["RELAUNCH_NATS_TLS_CA"]["value"] == "/var/run/secrets/relaunch/nats-tls/ca.crt"
        assert "RELAUNCH_NATS_TLS_CERT" in env and "RELAUNCH_NATS_TLS_KEY" in env
        seen.add(component)
    assert seen == set(USERS), seen


def test_streams_are_set_up_by_an_admin_hook_job(objects):
    job = next(o for o in objects if o["kind"] == "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == ["relaunch.common.natsauth", "setup"]


def test_without_nats_auth_nothing_is_mounted_and_no_job_runs():
    objects = render({})
    assert not [o for o in objects if o["kind"] == "Job"]
    for _, spec in pods(objects):
        assert "RELAUNCH_NATS_USER" not in {e["name"] for e in spec["containers"][0]["env"]}
        assert not [v for v in spec["volumes"] if v["name"].startswith("nats-")]
