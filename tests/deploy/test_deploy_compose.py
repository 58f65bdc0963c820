"""deploy/compose/compose.yaml is valid under the Compose specification's JSON schema and wires the
demo together consistently. Nothing here runs Docker: CI has no engine, so `docker compose up`
itself is not exercised.

The schema is the copy of compose-spec's compose-spec.json that check-jsonschema vendors (with
its licence, Apache-2.0, in check_jsonschema/builtin_schemas/vendor/licenses/LICENSE.compose-spec);
check-jsonschema's pin in constraints.txt fixes which revision is used.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import re

import jsonschema
import pytest
import yaml
from deploy_checks import DEPLOY, REPO, runnable_module, unknown_settings

COMPOSE_DIR = DEPLOY / "compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"
RELAUNCH_SERVICES = {"detector", "decider", "actuator", "api", "gpu-probe-node1", "gpu-probe-node2"}


def compose_schema() -> dict:
    vendored = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor"
    return json.loads((vendored / "compose-spec.json").read_text())


@pytest.fixture(scope="module")
def validator():
    schema = compose_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.fixture(scope="module")
def compose() -> dict:
    # safe_load resolves the YAML anchors and merge keys (<<) the way Compose does.
    return yaml.safe_load(COMPOSE.read_text())


def errors(validator, document) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_the_schema_is_compose_spec(validator):
    assert validator.schema["title"] == "Compose Specification"


def test_compose_file_is_valid_under_the_compose_specification(validator, compose):
    assert errors(validator, compose) == []


@pytest.mark.parametrize("mutate", [
    lambda c: c["services"]["nats"].update(healtcheck={}),
    lambda c: c["services"]["api"].update(ports="8080:8080"),
    lambda c: c["services"]["actuator"]["depends_on"]["slurmctld"].update(condition="service_up"),
    lambda c: c.update(volume={}),
], ids=["misspelt key", "wrong type", "bad enum", "unknown top-level key"])
def test_the_schema_rejects_mistakes(validator, compose, mutate):
    """Guards the test above: the validator does catch what `docker compose config` would."""
    broken = copy.deepcopy(compose)
    mutate(broken)
    assert errors(validator, broken)


def test_the_stack_has_infrastructure_slurm_and_every_service(compose):
    services = set(compose["services"])
    assert {"nats", "postgres", "redis", "munge", "slurmctld", "node1", "node2", "demo"} <= services
    assert RELAUNCH_SERVICES <= services


def test_relaunch_services_share_one_image_with_their_own_entry_points(compose):
    services = compose["services"]
    assert len({services[name]["image"] for name in [*RELAUNCH_SERVICES, "demo"]}) == 1
    # Built once, by one service, and used by the others (one export, no dangling copies).
    for image in ("relaunch:dev", "relaunch-slurm:dev"):
        users = [name for name, s in services.items() if s.get("image") == image]
        builders = [name for name in users if "build" in services[name]]
        assert len(users) > 1 and len(builders) == 1, (image, builders)
    for name in RELAUNCH_SERVICES:
        command = services[name]["command"]
        assert command[:2] == ["python", "-m"] and runnable_module(command[2]), name
    assert services["demo"]["command"][:2] == ["relaunch", "demo"]


def test_relaunch_services_run_non_root_on_a_read_only_filesystem(compose):
    for name in RELAUNCH_SERVICES:
        service = compose["services"][name]
        assert service["user"] == "10001:10001", name
        assert service["read_only"] is True and "/tmp" in service["tmpfs"], name
        assert service["cap_drop"] == ["ALL"], name


def test_every_build_context_and_bind_mount_exists(compose):
    for name, service in compose["services"].items():
        if "build" in service:
            context = (COMPOSE_DIR / service["build"]["context"]).resolve()
            assert (context / service["build"]["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source}"
            else:
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"
    assert (REPO / "examples" / "flaky-train.sh").is_file()  # what the demo submits


def test_dependencies_name_services_that_exist(compose):
    for name, service in compose["services"].items():
        for dependency in service.get("depends_on", {}):
            assert dependency in compose["services"], f"{name} depends on unknown {dependency}"


def test_every_relaunch_variable_is_a_setting_the_services_accept(compose):
    names = [n for s in compose["services"].values() for n in (s.get("environment") or {})]
    assert unknown_settings(names) == []


def test_health_checks_probe_each_services_own_health_port(compose):
    for name in ("detector", "decider", "actuator", "api"):
        service = compose["services"][name]
        env = service["environment"]
        port = env.get("RELAUNCH_API_PORT") or next(v for k, v in env.items() if k.endswith("_HEALTH_PORT"))
        assert f"http://127.0.0.1:{port}/healthz" in " ".join(service["healthcheck"]["test"]), name


def test_slurm_containers_match_slurm_conf_and_the_cluster_name(compose):
    conf = (COMPOSE_DIR / "slurm" / "slurm.conf").read_text()
    settings = dict(re.findall(r"^(\w+)=(\S+)", conf, re.MULTILINE))
    services = compose["services"]
    assert services[settings["SlurmctldHost"]]["hostname"] == settings["SlurmctldHost"]
    assert settings["NodeName"] == "node[1-2]"
    for node in ("node1", "node2"):
        assert services[node]["hostname"] == node and services[node]["command"] == ["slurmd", node]
        assert f"gpu-probe-{node}" in services and services[f"gpu-probe-{node}"]["command"][-1] == node
    for name in RELAUNCH_SERVICES:
        assert services[name]["environment"]["RELAUNCH_CLUSTER"] == settings["ClusterName"], name


def test_actuator_and_demo_reach_slurm_and_jobs_share_their_log_folder(compose):
    services = compose["services"]
    for name in ("actuator", "demo", "slurmctld", "node1", "node2"):
        volumes = services[name]["volumes"]
        assert "munge-socket:/run/munge" in volumes, name
        assert "./slurm/slurm.conf:/etc/slurm/slurm.conf:ro" in volumes, name
    assert services["actuator"]["environment"]["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    run_dir = services["demo"]["environment"]["RELAUNCH_RUN_DIR"]
    for name in ("demo", "node1", "node2"):
        assert f"jobs:{run_dir}" in services[name]["volumes"], name
    assert f"jobs:{run_dir}:ro" in services["detector"]["volumes"]


# --- compose.ci.yaml: how CI runs this file (make demo-compose) ---------------------------------------

class _CiLoader(yaml.SafeLoader):
    """Compose's `!reset` (drop the base file's value) read as None."""


_CiLoader.add_constructor("!reset", lambda loader, node: None)


def test_the_ci_override_runs_every_service_on_the_host_network_on_its_own_ports(compose):
    ci = yaml.load((COMPOSE_DIR / "compose.ci.yaml").read_text(), Loader=_CiLoader)
    assert set(ci["services"]) == set(compose["services"])
    for name, service in ci["services"].items():
        assert service["network_mode"] == "host", name
    text = (COMPOSE_DIR / "compose.ci.yaml").read_text() + (COMPOSE_DIR / "ci" / "slurm.conf").read_text()
    ports = [int(p) for p in re.findall(r"(?<![\d.])(28\d\d\d)(?!\d)", text)]
    assert ports and all(28400 <= p <= 28499 for p in ports)
    # The machine's CA bundle reaches pip only through the CI stand-in, never the users' images.
    assert "pip.conf" not in (COMPOSE_DIR / "Dockerfile").read_text()
    assert "ca-certificates.crt" in (COMPOSE_DIR / "ci" / "python" / "Dockerfile").read_text()
