"""Helpers shared by the deploy/ tests (offline: no servers, no network).

The services refuse unknown RELAUNCH_<SERVICE>_* settings at start, so every deployment recipe
(Helm chart, compose file, systemd env file) is checked here against the settings classes
themselves: a setting renamed in code and not in deploy/ fails a test instead of a start.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# Longest prefix first: RELAUNCH_API_URL is ApiSettings' (it ignores it), not CommonSettings'.
SERVICE_SETTINGS = {
    "RELAUNCH_DETECTOR_": ("relaunch.detector.settings", "DetectorSettings"),
    "RELAUNCH_DECIDER_": ("relaunch.decider.settings", "DeciderSettings"),
    "RELAUNCH_ACTUATOR_": ("relaunch.actuator.settings", "ActuatorSettings"),
    "RELAUNCH_WATCHDOG_": ("relaunch.actuator.watchdog.settings", "WatchdogSettings"),
    "RELAUNCH_API_": ("relaunch.api.settings", "ApiSettings"),
    "RELAUNCH_PROBE_": ("relaunch.gpu_probe.settings", "ProbeSettings"),
    # slurmrestd, read by the actuator and the watchdog when RELAUNCH_SLURM_API=rest (not an entry point).
    "RELAUNCH_SLURMRESTD_": ("relaunch.actuator.settings", "SlurmRestSettings"),
    "RELAUNCH_NOTIFIER_": ("relaunch.notifier.settings", "NotifierSettings"),
}
NOT_SERVICES = {"SlurmRestSettings"}
# Read straight from the environment by the relaunch CLI (relaunch demo), not by a settings class.
CLI_ONLY = {"RELAUNCH_RUN_DIR"}


def settings_class(prefix: str):
    module, name = SERVICE_SETTINGS[prefix]
    return getattr(importlib.import_module(module), name)


def setting_fields(prefix: str) -> set[str]:
    return set(settings_class(prefix).model_fields)


def unknown_settings(names) -> list[str]:
    """The RELAUNCH_* names among `names` that no settings class (nor the CLI) reads."""
    from relaunch.common.settings import CommonSettings

    common = {f"RELAUNCH_{field}".upper() for field in CommonSettings.model_fields}
    unknown = []
    for name in names:
        if not name.startswith("RELAUNCH_"):
            continue
        prefix = next((p for p in SERVICE_SETTINGS if name.startswith(p)), None)
        if prefix is not None:
            if name[len(prefix):].lower() not in setting_fields(prefix):
                unknown.append(name)
        elif name not in common and name not in CLI_ONLY:
            unknown.append(name)
    return sorted(set(unknown))


def runnable_module(module: str) -> bool:
    """`python -m module` would find something to run: an installed module, or a package with a __main__."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is None:
            return False
        return spec.submodule_search_locations is None or importlib.util.find_spec(f"{module}.__main__") is not None
    except ModuleNotFoundError:
        return False


# Each entry point a deployment runs -> the settings class of that service (whose `backends` says
# which RELAUNCH_*_URL it cannot start without: relaunch.common.settings.require_backends).
ENTRY_POINTS = {module.removesuffix(".settings"): (module, name) for module, name in SERVICE_SETTINGS.values()
                if name not in NOT_SERVICES}


def entry_point(command) -> str | None:
    """The module of a `python -m MODULE ...` command (a list), or None."""
    command = list(command or [])
    if len(command) >= 3 and command[0] in ("python", "python3") and command[1] == "-m":
        return command[2]
    return None


def needed_variables(module: str) -> list[str]:
    """The RELAUNCH_*_URL variables the service started by `python -m module` needs, from its settings."""
    path, name = ENTRY_POINTS[module]
    cls = getattr(importlib.import_module(path), name)
    return [f"RELAUNCH_{backend.upper()}" for backend in cls.backends]
