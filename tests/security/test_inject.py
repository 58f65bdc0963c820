"""Attack: injecting a GPU fault with the shared `cli` credentials (issue 35, item 5). Every training process of
every user holds the `cli` NATS user; `relaunch inject xid --node node4 --code 79` with it (or a raw NATS
request on `relaunch.control.inject.<cluster>.node4`) would make the local stack's probe report node4 failed,
and the decider exclude it from every job that fails there.

Proves the threat model's line "training code ... may never cause: injecting GPU faults" (docs/security.md,
"Threat model"; "Who may inject"): both are refused (a NATS permissions violation; the CLI says so and exits
non-zero), the probe applies nothing (its injection counter and the node's health on the bus are unchanged),
while the operator's path (the `operator` NATS user, RELAUNCH_INJECT_NATS_PASSWORD_FILE, which the local
stack's .run/env sets) still injects and clears the fault."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest
from attacks import forget, metric, relaunch, run_dir
from slurmjobs import wait_until

from relaunch.common import natsauth, subjects
from relaunch.common.schemas import FaultInjection, dump

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=14)]

NODE = "node4"
PROBE_NODE4 = 97
"""PORT_BASE + 93 + 4: gpu-probe-node4's /metrics (scripts/stack.sh)."""


def injections(env: dict) -> float:
    return sum(metric(env, PROBE_NODE4, "relaunch_probe_injections_total", f'accepted="{accepted}"')
               for accepted in ("true", "false"))


def injected_health(bus, since: int) -> list[dict]:
    """node4's health published at once on a new XID or an injection (not a heartbeat) since `since`."""
    subject = subjects.signal_node(bus.env["RELAUNCH_CLUSTER"], NODE)
    return [body for subj, data in bus.messages[since:] if subj == subject
            and (body := json.loads(data)).get("trigger") in ("inject", "xid")]


def as_cli(env: dict, **more: str) -> dict[str, str]:
    """What a training process (or a user's shell) holds: the cli user, no operator password."""
    return {"RELAUNCH_NATS_USER": natsauth.CLI,
            "RELAUNCH_NATS_PASSWORD_FILE": str(run_dir(env) / "creds" / f"{natsauth.CLI}.pass"),
            "RELAUNCH_INJECT_NATS_PASSWORD_FILE": "", **more}


async def raw_request(env: dict) -> list[str]:
    """A plain NATS request as the cli user; the server's errors it got."""
    import nats

    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    cli = natsauth.CLI
    nc = await nats.connect(env["RELAUNCH_NATS_URL"], user=cli, inbox_prefix=natsauth.inbox_prefix(cli),
                            password=natsauth.read_password(run_dir(env) / "creds" / f"{cli}.pass"),
                            error_cb=on_error, allow_reconnect=False)
    try:
        injection = FaultInjection(cluster=env["RELAUNCH_CLUSTER"], node=NODE, fault="xid", code=79,
                                   requested_at=dt.datetime.now(dt.UTC))
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await nc.request(subjects.control_inject(env["RELAUNCH_CLUSTER"], NODE), dump(injection), timeout=3)
        await asyncio.sleep(0.5)
        return errors
    finally:
        await nc.close()


def test_the_cli_user_cannot_inject_and_the_operator_can(services, bus):
    env = services
    since, before = len(bus.messages), injections(env)
    inject = ("inject", "xid", "--node", NODE, "--code", "79")
    for label, extra in (("cli user", as_cli(env)),
                         ("cli user named for inject", as_cli(env, RELAUNCH_INJECT_NATS_USER=natsauth.CLI,
                                                              RELAUNCH_INJECT_NATS_PASSWORD_FILE=str(
                                                                  run_dir(env) / "creds" / f"{natsauth.CLI}.pass")))):
        out = relaunch(env, *inject, **extra)
        said = (out.stdout + out.stderr).decode(errors="replace")
        assert out.returncode != 0, (label, said)
        assert "refused" in said.lower() or "permission" in said.lower(), (label, said)
    errors = asyncio.run(raw_request(env))
    wanted = f'permissions violation for publish to "{subjects.control_inject(env["RELAUNCH_CLUSTER"], NODE)}"'
    assert any(wanted in e.lower() for e in errors), errors
    assert injections(env) == before, "the probe answered an injection the cli user sent"
    assert not injected_health(bus, since), "node4's probe reported an injected fault"

    # The operator's path: the operator user's password file, as `source .run/env` sets it.
    operator = {**as_cli(env), "RELAUNCH_INJECT_NATS_PASSWORD_FILE": str(run_dir(env) / "creds" / "operator.pass")}
    try:
        out = relaunch(env, *inject, **operator)
        assert out.returncode == 0, (out.stdout + out.stderr).decode(errors="replace")
        assert injections(env) == before + 1
        health = wait_until("node4's health after the injection", lambda: injected_health(bus, since), 30)
        assert health[-1]["verdict"] == "failed" and any(x["code"] == 79 for x in health[-1]["xids"]), health[-1]
    finally:
        cleared = relaunch(env, "inject", "clear", "--node", NODE, **operator)
        forget(env, NODE)  # the XID reading must not count against node4 in later tests of the session
    assert cleared.returncode == 0, (cleared.stdout + cleared.stderr).decode(errors="replace")
