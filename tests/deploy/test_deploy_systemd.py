"""deploy/systemd: one unit per service, each well-formed (a parser check of the keys we rely on,
plus `systemd-analyze verify` where it is installed; it needs no running systemd), and an env file
template whose every RELAUNCH_* key is a setting the services accept.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_checks import DEPLOY, runnable_module, unknown_settings

SYSTEMD = DEPLOY / "systemd"
UNITS = sorted(SYSTEMD.glob("*.service"))
ENV_FILE = SYSTEMD / "relaunch.env"
VENV_PYTHON = "/opt/relaunch/venv/bin/python"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> values (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert line.endswith("]"), f"{path.name}:{number}: bad section header"
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{path.name}:{number}: not key=value in a section"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def parse_env_file(path: Path, include_commented: bool = False) -> dict[str, str]:
    """KEY=VALUE lines the way systemd's EnvironmentFile= reads them (quotes removed)."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if include_commented and re.match(r"#\s*[A-Z][A-Z0-9_]*=", line):
            line = line.lstrip("#").strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        env[key] = " ".join(shlex.split(value)) if value else ""
    return env


def test_there_is_a_unit_for_every_service():
    names = {u.name for u in UNITS}
    assert names == {"relaunch-detector.service", "relaunch-decider.service", "relaunch-actuator.service",
                     "relaunch-api.service", "relaunch-gpu-probe@.service", "relaunch-notifier.service"}


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_has_the_keys_an_operator_relies_on(unit):
    sections = parse_unit(unit)
    assert set(sections) == {"Unit", "Service", "Install"}
    service = sections["Service"]
    assert sections["Unit"]["Description"][0]
    assert service["User"] == ["relaunch"] and service["Group"] == ["relaunch"]
    assert service["EnvironmentFile"] == ["/etc/relaunch/relaunch.env"]
    assert service["Restart"] == ["on-failure"]
    assert service["NoNewPrivileges"] == ["yes"] and service["ProtectSystem"] == ["strict"]
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]
    (exec_start,) = service["ExecStart"]
    argv = exec_start.split()
    assert argv[:2] == [VENV_PYTHON, "-m"]
    assert runnable_module(argv[2]), f"{unit.name}: python -m {argv[2]} would not start"
    if unit.name.endswith("@.service"):
        assert argv[3:] == ["--node", "%i"]


def test_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (the parser check above still ran)")
    # verify insists that ExecStart's program exists: point it at one that does.
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    copies = []
    for unit in UNITS:
        copy = tmp_path / unit.name.replace("@.service", "@node1.service")
        copy.write_text(unit.read_text().replace(VENV_PYTHON, str(stub)))
        copies.append(str(copy))
    result = subprocess.run([analyze, "verify", "--man=no", *copies], capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, output
    # verify prints, but does not fail on, unknown keys and bad values; we do.
    assert not re.search(r"Unknown|Invalid|Failed|not executable|Missing|ignoring", output), output


def test_env_file_keys_are_settings_the_services_accept():
    env = parse_env_file(ENV_FILE, include_commented=True)
    assert unknown_settings(env) == []


def test_env_file_starts_the_actuator_in_observe_mode_with_the_controllers_config():
    env = parse_env_file(ENV_FILE)
    assert env["RELAUNCH_ACTUATOR_MODE"] == "observe"
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    for key in ("RELAUNCH_CLUSTER", "RELAUNCH_NATS_URL", "RELAUNCH_DATABASE_URL", "RELAUNCH_REDIS_URL"):
        assert env[key], key
    # Fixed health ports, so that an operator (and a monitor) knows where /healthz is.
    ports = [env[k] for k in env if k.endswith("_HEALTH_PORT")] + [env["RELAUNCH_API_PORT"]]
    assert len(ports) == len(set(ports)) == 6


def test_env_file_json_values_survive_systemds_quoting():
    env = parse_env_file(ENV_FILE, include_commented=True)
    assert json.loads(env["RELAUNCH_DETECTOR_EXTRA_SIGNATURES"]) == ["/etc/relaunch/signatures.toml"]
