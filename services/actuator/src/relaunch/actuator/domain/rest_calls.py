"""The slurmrestd request each Slurm command of a reconcile plan stands for (pure).

A plan carries the command the CLI adapter runs (commands.py builds and checks it, and the audit
entry records it); the REST adapter (adapters/slurmrest.py) sends the request that does the same.
Keeping the command as the one description of a step means the reconciler does not know which
adapter runs it, and a step added to commands.py fails loudly here until it has a REST form.

Which release offers what (read from the /openapi document of each release's slurmrestd, measured
on Debian's 24.11.5 and 26.05.5; docs/slurm-versions.md, "Through slurmrestd"):

| command | request | 24.11 (v0.0.40-42) | 26.05 (v0.0.42-45) |
|---|---|---|---|
| scontrol requeuehold J | POST /slurm/V/jobs/requeue {"jobs": [J], "flags": ["Hold"]} | absent | v0.0.45 |
| scontrol release J | POST /slurm/V/job/J {"hold": false} | yes | yes |
| scontrol update JobId=J StartTime=now | POST /slurm/V/job/J {"begin_time": now} | yes | yes |
| scontrol update JobId=J ExcNodeList=a,b | POST /slurm/V/job/J {"excluded_nodes": [a, b]} | yes | yes |
| scancel J | DELETE /slurm/V/job/J | yes | yes |
| scontrol update NodeName=N State=DRAIN Reason=R | POST /slurm/V/node/N {"state": ["DRAIN"], "reason": R} | yes | yes |
| scontrol update NodeName=N State=DOWN Reason=R (a lost node) | POST /slurm/V/node/N {"state": ["DOWN"], "reason": R} | yes | yes |

Where the API has no form for a command (requeue before v0.0.45), `rest_call` returns None and the
adapter either runs the command itself (RELAUNCH_SLURMRESTD_CLI_FALLBACK) or refuses the step for good.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from relaunch.common.errors import PermanentError

from .commands import JOB_ID, NODE_NAME, REASON, check

SUPPORTED = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
"""The data_parser versions whose job, node and accounting shapes slurm_values.py reads (23.11 to 26.05).
A newer one is used too when offered (logged): its shapes have been additive so far."""
REQUEUE_SINCE = "v0.0.45"
"""The first version with the requeue endpoints (Slurm 26.05)."""
_VERSION = re.compile(r"^/(slurm|slurmdb)/(v0\.0\.(\d+))/")


@dataclass(frozen=True)
class RestCall:
    method: str
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{self.method} {self.path}" + (f" {self.body}" if self.body else "")


@dataclass(frozen=True)
class Api:
    """What one slurmrestd offers: the versions picked for /slurm and /slurmdb, and its paths."""

    slurm: str
    slurmdb: str | None
    """None: slurmrestd loaded no openapi/slurmdbd plugin (no accounting through it)."""
    paths: frozenset[str]

    @property
    def has_requeue(self) -> bool:
        return f"/slurm/{self.slurm}/jobs/requeue" in self.paths


def pick_api(openapi: dict) -> Api:
    """The newest data_parser version slurmrestd offers for each plugin, from its /openapi/v3 document."""
    paths = openapi.get("paths") if isinstance(openapi, dict) else None
    if not isinstance(paths, dict):
        raise PermanentError("slurmrestd's /openapi/v3 has no paths: is this slurmrestd?")
    found: dict[str, set[int]] = {"slurm": set(), "slurmdb": set()}
    for path in paths:
        m = _VERSION.match(path)
        if m:
            found[m.group(1)].add(int(m.group(3)))
    oldest = int(SUPPORTED[0].rsplit(".", 1)[1])
    slurm = sorted(n for n in found["slurm"] if n >= oldest)
    if not slurm:
        offered = ", ".join(f"v0.0.{n}" for n in sorted(found["slurm"])) or "none"
        raise PermanentError(f"slurmrestd offers no data_parser relaunch reads (offered: {offered}; relaunch reads "
                             f"{SUPPORTED[0]} and later: Slurm 23.11 and later)")
    db = sorted(n for n in found["slurmdb"] if n >= oldest)
    return Api(slurm=f"v0.0.{slurm[-1]}", slurmdb=f"v0.0.{db[-1]}" if db else None, paths=frozenset(paths))


def rest_call(argv: tuple[str, ...] | list[str], api: Api, now_epoch: int) -> RestCall | None:
    """The request that does what `argv` (a command from commands.py) does; None where this
    slurmrestd has no form for it. A command of any other shape is a bug: PermanentError."""
    argv = tuple(argv)
    v = api.slurm
    match argv:
        case ("scontrol", "requeuehold", job):
            if not api.has_requeue:
                return None
            return RestCall("POST", f"/slurm/{v}/jobs/requeue",
                            {"jobs": [check(JOB_ID, job, "job id")], "flags": ["Hold"]})
        case ("scontrol", "release", job):
            return RestCall("POST", f"/slurm/{v}/job/{check(JOB_ID, job, 'job id')}", {"hold": False})
        case ("scancel", job):
            return RestCall("DELETE", f"/slurm/{v}/job/{check(JOB_ID, job, 'job id')}")
        case ("scontrol", "update", target, *changes) if target.startswith("JobId="):
            job = check(JOB_ID, target.removeprefix("JobId="), "job id")
            return RestCall("POST", f"/slurm/{v}/job/{job}", _job_changes(changes, now_epoch))
        case ("scontrol", "update", target, *changes) if target.startswith("NodeName="):
            node = check(NODE_NAME, target.removeprefix("NodeName="), "node name")
            return RestCall("POST", f"/slurm/{v}/node/{node}", _node_changes(changes))
    raise PermanentError(f"no slurmrestd form for the command {' '.join(argv)!r}")


def _job_changes(changes: list[str], now_epoch: int) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for change in changes:
        key, _, value = change.partition("=")
        if key == "StartTime" and value == "now":
            body["begin_time"] = {"set": True, "infinite": False, "number": now_epoch}
        elif key == "ExcNodeList":
            body["excluded_nodes"] = [check(NODE_NAME, n, "node name") for n in value.split(",") if n]
        else:
            raise PermanentError(f"no slurmrestd form for the job update {change!r}")
    if not body:
        raise PermanentError("a job update without changes")
    return body


def _node_changes(changes: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for change in changes:
        key, _, value = change.partition("=")
        if key == "State" and value in ("DRAIN", "DOWN"):
            body["state"] = [value]
        elif key == "Reason":
            body["reason"] = check(REASON, value, "drain reason")
        else:
            raise PermanentError(f"no slurmrestd form for the node update {change!r}")
    return body
