"""A deployed service is told where its backends are, and says so when one does not answer."""

from __future__ import annotations

import logging

import pytest

from relaunch.actuator.settings import ActuatorSettings
from relaunch.common.health import Reachability, without_password
from relaunch.common.settings import CommonSettings, SettingsError, require_backends


def test_a_service_started_without_a_backend_url_refuses_to_start_naming_the_variable(monkeypatch):
    monkeypatch.delenv("RELAUNCH_REDIS_URL", raising=False)
    monkeypatch.setenv("RELAUNCH_NATS_URL", "nats://nats:4222")
    with pytest.raises(SettingsError, match="RELAUNCH_REDIS_URL not set: ActuatorSettings needs it"):
        require_backends(CommonSettings(), ActuatorSettings)


def test_a_service_given_every_backend_url_starts(monkeypatch):
    monkeypatch.setenv("RELAUNCH_NATS_URL", "nats://nats:4222")
    monkeypatch.setenv("RELAUNCH_REDIS_URL", "redis://redis:6379/0")
    require_backends(CommonSettings(), ActuatorSettings)


def test_an_outage_is_logged_at_warning_once_then_at_intervals_and_its_end_too(caplog):
    now = [0.0]
    r = Reachability("Redis", "redis://u:secret@redis:6379/0", every_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for t in (0, 10, 59, 61):
            now[0] = t
            r.record(False, "connection refused")
        assert not r.reachable
        r.record(True)
    assert r.reachable
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 3 and "unreachable" in lines[0] and "unreachable" in lines[1] and "again" in lines[2]
    assert "secret" not in " ".join(lines)


def test_a_password_never_reaches_a_log_line():
    assert without_password("postgresql://relaunch:pw@db:5432/relaunch") == "postgresql://relaunch:***@db:5432/relaunch"
    assert without_password("redis://redis:6379/0") == "redis://redis:6379/0"
