"""Least privilege on the running stack (scripts/stack.sh): NATS enforces per-service users, no secret
is on any command line or in any environment, credentials are private files, and the services ran
within their permissions (no violation by a service user in the server's log: run after the e2e
tests, as a full `pytest` run does, this covers every recovery they drove)."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import nats
import pytest

from relaunch.common import natsauth, subjects

pytestmark = pytest.mark.reliability


def _run_dir(env: dict[str, str]) -> Path:
    return Path(env["RELAUNCH_RUN_DIR"])


def _passwords(run: Path) -> dict[str, str]:
    return {p.stem: natsauth.read_password(p) for p in (run / "creds").glob("*.pass")}


def test_credentials_are_private_files(services):
    run = _run_dir(services)
    users = set(_passwords(run))
    assert {"admin", "cli", "detector", "decider", "actuator", "watchdog", "api", "gpu-probe-node1"} <= users
    assert oct((run / "creds").stat().st_mode & 0o777) == "0o700"
    for path in [*(run / "creds").iterdir(), run / "nats" / "nats.conf", run / "nats" / "auth.conf"]:
        assert oct(path.stat().st_mode & 0o777) == "0o600", path


def test_no_secret_on_any_command_line_or_in_any_environment(services):
    run = _run_dir(services)
    secrets = list(_passwords(run).values())
    ps = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True).stdout
    assert "nats-server" in ps and "relaunch.detector" in ps
    leaked = [s[:4] + "..." for s in secrets if s in ps]
    assert not leaked, f"passwords on a command line: {leaked}"
    pids = [p.read_text().strip() for p in (run / "pids").glob("*.pid")]
    checked = 0
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        checked += 1
        assert not [s for s in secrets if s in environ], f"a password in the environment of pid {pid}"
    assert checked >= 5


async def test_the_stack_nats_refuses_a_service_outside_its_permissions(services):
    run = _run_dir(services)
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    subject = subjects.advice(services["RELAUNCH_CLUSTER"], "1")
    nc = await nats.connect(services["RELAUNCH_NATS_URL"], user="detector", error_cb=on_error,
                            password=natsauth.read_password(run / "creds" / "detector.pass"),
                            inbox_prefix=natsauth.inbox_prefix("detector"))
    try:
        await nc.publish(subject, b"{}")
        await nc.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.05)
        assert any(f'permissions violation for publish to "{subject}"' in e for e in errors), errors
    finally:
        await nc.close()
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(services["RELAUNCH_NATS_URL"], allow_reconnect=False, max_reconnect_attempts=1)


async def test_the_api_service_streams_live_events_as_its_own_user(services):
    """The api's NATS user can read EVENTS live (its ordered consumers) through the running service."""
    import httpx

    async with httpx.AsyncClient(base_url=services["RELAUNCH_API_URL"], timeout=10) as http:
        async with http.stream("GET", "/v1/events/stream") as resp:
            assert resp.status_code == 200, await resp.aread()
            async for _ in resp.aiter_bytes():  # the stream opened (a first comment or event)
                break


SERVICE_USER = re.compile(r'"\$G/user:([^"]+)" - (Publish|Subscription) Violation - Subject "([^"]+)"')


def test_the_services_ran_within_their_permissions(services):
    """No permission violation in the stack's NATS log by a service's user (the test suite itself
    connects as admin, so every line here would be a service needing a right it was not given)."""
    log = (_run_dir(services) / "log" / "nats.log").read_text(errors="replace")
    service_users = {"detector", "decider", "actuator", "watchdog", "api"}
    found = [m.groups() for m in SERVICE_USER.finditer(log)
             if m.group(1) in service_users or m.group(1).startswith("gpu-probe-")]
    # The deliberate refusal above is the detector publishing Advice: not a service's own doing.
    found = [f for f in found if not (f[0] == "detector" and f[2].startswith(f"{subjects.PREFIX}.advice."))]
    assert not found, found
