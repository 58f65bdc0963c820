"""Wiring checked, not hoped: every deployment gives each service every backend URL it needs.

What a service needs is read from its settings class (`backends`, which require_backends enforces at
start), never listed again here: a service that starts needing Redis fails this test in every recipe
that does not give it RELAUNCH_REDIS_URL, before a user meets a service that retries forever.
"""

from __future__ import annotations

import importlib
import inspect
from urllib.parse import urlsplit

import pytest
import yaml
from deploy_checks import DEPLOY, ENTRY_POINTS, entry_point, needed_variables

from relaunch.common.settings import ServiceSettings

COMPOSE = DEPLOY / "compose" / "compose.yaml"
# Which compose service serves each backend URL.
BACKEND_SERVICES = {"RELAUNCH_NATS_URL": "nats", "RELAUNCH_REDIS_URL": "redis", "RELAUNCH_DATABASE_URL": "postgres"}


def test_every_service_settings_class_is_an_entry_point_here():
    classes = {(path, name) for path, name in ENTRY_POINTS.values()}
    for path, _ in classes:
        module = importlib.import_module(path)
        for name, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, ServiceSettings) and obj is not ServiceSettings and obj.__module__ == path:
                assert (path, name) in classes, f"{path}.{name} has no entry point in ENTRY_POINTS"
    assert all(needed_variables(m) for m in ENTRY_POINTS), "every service needs NATS at least"


def compose_services() -> list[tuple[str, str, dict]]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    found = [(name, entry_point(s.get("command")), s) for name, s in services.items()]
    return [(name, module, s) for name, module, s in found if module in ENTRY_POINTS]


def test_compose_runs_every_service():
    assert {module for _, module, _ in compose_services()} >= set(ENTRY_POINTS) - {"relaunch.actuator.watchdog"}


@pytest.mark.parametrize("service", [name for name, _, _ in compose_services()])
def test_compose_gives_each_service_every_backend_it_needs_and_starts_it_first(service):
    _, module, spec = next(s for s in compose_services() if s[0] == service)
    env = spec.get("environment") or {}
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for variable in needed_variables(module):
        assert env.get(variable), f"compose service {service} ({module}) has no {variable}"
        backend = BACKEND_SERVICES[variable]
        assert urlsplit(env[variable]).hostname == backend, f"{service}: {variable} does not name {backend}"
        assert backend in services
        assert backend in (spec.get("depends_on") or {}), f"{service} does not wait for {backend}"
