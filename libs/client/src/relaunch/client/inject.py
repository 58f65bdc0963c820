"""`relaunch inject ...`: make the fake GPU probe on one node report a fault (demos and tests).

The request is a plain NATS request/reply on `subjects.control_inject(cluster, node)`, so the command
knows whether a probe heard it. Exit codes (as the rest of the CLI): 0 the probe applied the fault,
2 bad arguments, the probe refused them (e.g. it reads a real GPU) or NATS refused this user the
request, 3 no probe answered in time or NATS is unreachable. Reads RELAUNCH_NATS_URL and RELAUNCH_CLUSTER.

Who may inject (docs/security.md, "Who may inject"): only the operator identity, the NATS user
`operator` (relaunch.common.natsauth.OPERATOR), never the shared `cli` user that every training
process holds. The command connects as RELAUNCH_INJECT_NATS_USER (default `operator`) with the password
in RELAUNCH_INJECT_NATS_PASSWORD_FILE when that is set (the local stack's .run/env sets it), else as
the RELAUNCH_NATS_* user; and only a probe running the fake backend applies a fault at all.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from enum import StrEnum

import nats
import nats.errors
import typer
from pydantic import ValidationError
from rich.console import Console

from relaunch.common import subjects
from relaunch.common.schemas import FaultInjection, InjectionAck, dump
from relaunch.common.settings import SettingsError, nats_servers

from . import settings as client_settings
from .terminal import shown

app = typer.Typer(help="Make the fake GPU probe on a node report a fault (XID, ECC, NVLink, throttling, a lost "
                       "GPU), or clear them.", no_args_is_help=True, add_completion=False)
console = Console()
err = Console(stderr=True)

EXIT_OK, EXIT_USAGE, EXIT_NO_PROBE = 0, 2, 3
DEFAULT_TIMEOUT_S = 3.0


class NvlinkCounter(StrEnum):
    crc = "crc"
    replay = "replay"
    recovery = "recovery"


class ThrottleReason(StrEnum):
    hw_slowdown = "hw_slowdown"
    hw_thermal = "hw_thermal"
    sw_thermal = "sw_thermal"
    power_brake = "power_brake"


def _nats_url() -> str:
    return client_settings.nats_url()


def _cluster(cluster: str | None) -> str:
    return client_settings.cluster(cluster)


class NotAllowed(Exception):
    """NATS refused this user the inject request (a permissions violation): not the operator identity."""


def _connect_options() -> tuple[str, dict]:
    """(NATS user, nats.connect keyword arguments) for an injection (the module's docstring says which)."""
    from relaunch.common.connection import connect_options  # user and TLS from RELAUNCH_NATS_* settings
    from relaunch.common.natsauth import OPERATOR

    settings = client_settings.common()
    password_file = os.environ.get("RELAUNCH_INJECT_NATS_PASSWORD_FILE", "")
    if password_file:
        settings = settings.model_copy(update={
            "nats_user": os.environ.get("RELAUNCH_INJECT_NATS_USER", "") or OPERATOR,
            "nats_password_file": password_file})
    return settings.nats_user, connect_options(settings)


async def request_injection(nats_url: str, injection: FaultInjection,
                            timeout_s: float = DEFAULT_TIMEOUT_S) -> InjectionAck | None:
    """Send one injection to the node's probe: its answer, or None when no probe answered in time.

    Raises NotAllowed when NATS refuses this user the request, and OSError-like errors
    (nats.errors.NoServersError, OSError, TimeoutError) when NATS itself cannot be reached."""
    user, options = _connect_options()
    refused: list[str] = []

    async def on_error(exc: Exception) -> None:
        # nats-py logs every failed connect with a traceback; `send` reports failures in one line. A
        # denied publish arrives here only (the request itself then just times out).
        if "permissions violation" in str(exc).lower():
            refused.append(str(exc))

    # nats-py treats max_reconnect_attempts=0 as "forever" for the first connect; 1 means one retry.
    nc = await nats.connect(nats_servers(nats_url), connect_timeout=min(timeout_s, 3.0), allow_reconnect=False,
                            max_reconnect_attempts=1, reconnect_time_wait=0.2, error_cb=on_error, **options)
    try:
        msg = await nc.request(subjects.control_inject(injection.cluster, injection.node), dump(injection),
                               timeout=timeout_s)
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        if refused:
            raise NotAllowed(f"NATS refused the NATS user {user or '(none)'} the inject request ({refused[0]}): "
                             "only the operator identity may inject. Set RELAUNCH_INJECT_NATS_PASSWORD_FILE to the "
                             "operator user's password file (the local stack's .run/env does)") from None
        return None
    finally:
        await nc.close()
    return InjectionAck.model_validate_json(msg.data)


async def send(fault: str, node: str, *, gpu: int = 0, code: int | None = None, count: int | None = None,
               nvlink_counter: str = "crc", throttle: str | None = None, cluster: str | None = None,
               nats_url: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, str]:
    """Inject one fault; returns (exit code, message for a person). What every command below runs."""
    cluster = _cluster(cluster)
    nats_url = nats_url or _nats_url()
    try:
        injection = FaultInjection(cluster=cluster, node=node, fault=fault, gpu=gpu, code=code, count=count,
                                   nvlink_counter=nvlink_counter, throttle=throttle,
                                   requested_at=dt.datetime.now(dt.UTC))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'request'}: {e['msg']}" for e in exc.errors())
        return EXIT_USAGE, f"invalid request: {problems}"
    try:
        ack = await request_injection(nats_url, injection, timeout_s)
    except (NotAllowed, SettingsError) as exc:  # refused, or a password file that cannot be read
        return EXIT_USAGE, str(exc)
    except (OSError, TimeoutError, nats.errors.Error) as exc:
        return EXIT_NO_PROBE, (f"cannot reach NATS at {nats_url}: {exc or type(exc).__name__}. "
                               "Is the stack up (make up) and RELAUNCH_NATS_URL set (source .run/env)?")
    if ack is None:
        return EXIT_NO_PROBE, (f"no gpu-probe answered for node {node} of cluster {cluster} within {timeout_s:g}s. "
                               "Is the stack up, the node name right, and RELAUNCH_CLUSTER the stack's cluster?")
    if not ack.accepted:
        return EXIT_USAGE, f"the probe on {node} refused: {ack.detail}"
    return EXIT_OK, f"{node}: {ack.detail} (the probe publishes its NodeHealth now)"


def _run(fault: str, node: str, cluster: str | None, timeout: float, **kw) -> None:
    code, message = asyncio.run(send(fault, node, cluster=cluster, timeout_s=timeout, **kw))
    (console if code == EXIT_OK else err).print(shown(message))
    raise typer.Exit(code)


_NODE = typer.Option(..., "--node", help="Slurm node whose probe should report the fault.")
_GPU = typer.Option(0, "--gpu", min=0, max=63, help="GPU index on that node.")
_CLUSTER = typer.Option(None, "--cluster", help="Cluster name (default: $RELAUNCH_CLUSTER).")
_TIMEOUT = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", min=0.1, help="Seconds to wait for the probe's answer.")


@app.command("xid")
def xid(node: str = _NODE, code: int = typer.Option(..., "--code", min=1, max=1023, help="XID code, e.g. 79."),
        gpu: int = _GPU, cluster: str = _CLUSTER, timeout: float = _TIMEOUT) -> None:
    """An XID event on one GPU (79: fell off the bus, 48: double-bit ECC, 13: application)."""
    _run("xid", node, cluster, timeout, gpu=gpu, code=code)


@app.command("ecc")
def ecc(node: str = _NODE, count: int = typer.Option(1, "--count", min=1, help="Uncorrectable errors to add."),
        gpu: int = _GPU, cluster: str = _CLUSTER, timeout: float = _TIMEOUT) -> None:
    """Uncorrectable ECC errors on one GPU (until cleared)."""
    _run("ecc", node, cluster, timeout, gpu=gpu, count=count)


@app.command("nvlink")
def nvlink(node: str = _NODE,
           errors: int = typer.Option(500, "--errors", min=1, help="NVLink errors added every sample."),
           counter: NvlinkCounter = typer.Option(NvlinkCounter.crc, "--counter", help="Which NVLink counter."),
           gpu: int = _GPU, cluster: str = _CLUSTER, timeout: float = _TIMEOUT) -> None:
    """NVLink errors on one GPU, every sample until cleared."""
    _run("nvlink", node, cluster, timeout, gpu=gpu, count=errors, nvlink_counter=counter.value)


@app.command("throttle")
def throttle(node: str = _NODE,
             reason: ThrottleReason = typer.Option(ThrottleReason.hw_slowdown, "--reason", help="Why clocks slow."),
             gpu: int = _GPU, cluster: str = _CLUSTER, timeout: float = _TIMEOUT) -> None:
    """A clock slowdown on one GPU (until cleared)."""
    _run("throttle", node, cluster, timeout, gpu=gpu, throttle=reason.value)


@app.command("gpu-lost")
def gpu_lost(node: str = _NODE, gpu: int = _GPU, cluster: str = _CLUSTER, timeout: float = _TIMEOUT) -> None:
    """One GPU disappears (NVML: 'GPU is lost'), until cleared."""
    _run("gpu-lost", node, cluster, timeout, gpu=gpu)


@app.command("clear")
def clear(node: str = _NODE, cluster: str = _CLUSTER, timeout: float = _TIMEOUT) -> None:
    """Clear every injected fault on the node, and the XIDs its probe remembers."""
    _run("clear", node, cluster, timeout)
