"""The Slurm commands the reconciler runs, as argv lists with every value checked (pure: the Slurm
adapter runs them, and a plan carries the one it needs, so the audit text is the very command run).

Invariant: a value reaches an argv only if it matches its pattern in full (`fullmatch`: a `$` alone
would let a trailing newline through), whatever the caller checked before; the schemas check job ids
and node names too, so a refusal here means a bug upstream, and is permanent.
"""

from __future__ import annotations

import re

from relaunch.common.errors import PermanentError

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
JOB_ID = re.compile(r"^[0-9]{1,12}(_[0-9]{1,8})?$")
REASON = re.compile(r"^[A-Za-z0-9 _.,:;()/+#@-]{1,250}$")


def check(pattern: re.Pattern, value: str, what: str) -> str:
    """`value` if it matches `pattern` in full; PermanentError otherwise."""
    if not pattern.fullmatch(value):
        raise PermanentError(f"refusing to pass {value!r} to Slurm as a {what}")
    return value


def step_argv(step: str, job_id: str, nodes: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
    """The command one reconcile step runs (`nodes`: the whole ExcNodeList, for exclude)."""
    job_id = check(JOB_ID, job_id, "job id")
    nodes = [check(NODE_NAME, n, "node name") for n in nodes]
    commands = {
        "requeuehold": ("scontrol", "requeuehold", job_id),
        "release": ("scontrol", "release", job_id),
        "start_now": ("scontrol", "update", f"JobId={job_id}", "StartTime=now"),
        "exclude": ("scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes)}"),
        "cancel": ("scancel", job_id),
    }
    return commands[step]


def drain_argv(node: str, reason: str, state: str = "DRAIN") -> tuple[str, ...]:
    """Drain a node, or (state DOWN) mark a lost one down (draining.py)."""
    if state not in ("DRAIN", "DOWN"):
        raise ValueError(f"a node is drained or marked down here, not set {state!r}")
    return ("scontrol", "update", f"NodeName={check(NODE_NAME, node, 'node name')}", f"State={state}",
            f"Reason={check(REASON, reason, 'drain reason')}")
