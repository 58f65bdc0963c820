"""Turning Slurm's output into values: pure parsing, written for Slurm 22.05.

Quirks worked around here:
- `scontrol show job -o` prints one `Key=Value` line; values may contain spaces (Comment), so a
  token only starts a new key when it looks like `Key=`; we never read Comment from it.
- `squeue --json` (openapi v0.0.38) gives `exit_code` as a raw wait status (256 = exit 1) and
  `standard_output` unexpanded (`%x-%j.out`); expanded paths come from scontrol.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from relaunch.common.job_states import FINAL_STATES
from relaunch.common.optin import parse_comment

from .hostlists import expand

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9/:_]*=")
HELD_REASONS = frozenset({"job_requeued_in_held_state", "JobHeldAdmin", "JobHeldUser"})


def parse_scontrol_line(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = None
    for token in line.strip().split(" "):
        if _KEY.match(token):
            key, _, value = token.partition("=")
            fields.setdefault(key, value)
        elif key is not None and token:
            fields[key] += " " + token
    return fields


def parse_time(value: str | None) -> dt.datetime | None:
    """scontrol times are local wall-clock without zone; Slurm here runs in UTC (documented)."""
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def wait_status_to_exit_code(status: int | None) -> int | None:
    if status is None:
        return None
    if status & 0x7F:
        return 128 + (status & 0x7F)
    return (status >> 8) & 0xFF


@dataclass(frozen=True)
class Observed:
    """The scheduler's view of one job, as the reconciler needs it."""

    exists: bool
    state: str = ""
    reason: str = ""
    restarts: int = 0
    held: bool = False
    eligible_at: dt.datetime | None = None
    excluded: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    requeue_allowed: bool = True
    partition: str = ""

    @classmethod
    def gone(cls) -> Observed:
        return cls(exists=False)


def observed_from_scontrol(fields: dict[str, str]) -> Observed:
    state = fields.get("JobState", "")
    reason = fields.get("Reason", "")
    exc = fields.get("ExcNodeList", "(null)")
    nodes = fields.get("NodeList", "(null)")
    return Observed(
        exists=True,
        state=state,
        reason=reason,
        restarts=int(fields.get("Restarts", "0") or 0),
        held=state == "PENDING" and (fields.get("Priority") == "0" or reason in HELD_REASONS),
        eligible_at=parse_time(fields.get("EligibleTime")),
        excluded=tuple(expand(exc)) if exc not in ("(null)", "") else (),
        nodes=tuple(expand(nodes)) if nodes not in ("(null)", "") else (),
        requeue_allowed=fields.get("Requeue", "1") == "1",
        partition=fields.get("Partition", ""),
    )


@dataclass(frozen=True)
class SqueueJob:
    """One opted-in job from `squeue --json`, before paths are added."""

    job_id: str
    name: str
    state: str
    reason: str
    restarts: int
    nodes: tuple[str, ...]
    comment: str
    partition: str
    exit_code: int | None
    submitted: dt.datetime | None = None
    """This attempt's SubmitTime (Slurm gives every requeued attempt a new one)."""

    def change_key(self) -> tuple:
        return (self.state, self.reason, self.restarts, self.nodes, self.exit_code)


def opted_in_jobs(squeue_json: dict) -> list[SqueueJob]:
    """The jobs whose comment opts them in (malformed options included: the decider explains)."""
    jobs = []
    for entry in squeue_json.get("jobs", []):
        comment = entry.get("comment") or ""
        if not parse_comment(comment).opted_in:
            continue
        try:
            nodes = tuple(expand(entry.get("nodes") or ""))
        except ValueError:
            nodes = ()
        jobs.append(SqueueJob(
            job_id=str(entry["job_id"]),
            name=str(entry.get("name") or ""),
            state=str(entry.get("job_state") or ""),
            reason=str(entry.get("state_reason") or ""),
            restarts=int(entry.get("restart_cnt") or 0),
            nodes=nodes,
            comment=comment,
            partition=str(entry.get("partition") or ""),
            exit_code=wait_status_to_exit_code(entry.get("exit_code")) if entry.get("job_state") in FINAL_STATES else None,
            submitted=_epoch(entry.get("submit_time")),
        ))
    return jobs


def _epoch(value) -> dt.datetime | None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    return dt.datetime.fromtimestamp(value, dt.UTC)


_NODE_STATE_FLAGS = "*~#!%$@^-+"
"""sinfo's suffixes on a state: '*' not responding, '~' powered off, '#' powering up, and so on."""
USABLE_NODE_STATES = frozenset({"idle", "mix", "alloc", "comp", "resv", "plnd"})
"""Short sinfo states (%t) of a node that runs jobs now. Everything else (down, drain, drng, fail,
maint, unk, boot, ...) and any flagged state ("idle*": not responding) does not count."""


def usable_nodes_by_partition(sinfo_text: str) -> dict[str, int]:
    """`sinfo -h -N -o '%R|%N|%t'` -> partition -> how many of its nodes can run jobs now."""
    usable: dict[str, set[str]] = {}
    for line in sinfo_text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        partition, node, state = parts
        usable.setdefault(partition, set())
        if state in USABLE_NODE_STATES:
            usable[partition].add(node)
    return {partition: len(nodes) for partition, nodes in usable.items()}


@dataclass(frozen=True)
class NodeCondition:
    """A node as `sinfo -N -o '%N|%T|%E'` shows it (long state such as "drained" or "mixed")."""

    node: str
    state: str
    reason: str

    @property
    def draining(self) -> bool:
        """Drained or draining, by anyone: a drain is never repeated, nor someone's reason overwritten."""
        return "drain" in self.state.lower()


def parse_node_conditions(sinfo_text: str) -> dict[str, NodeCondition]:
    """`sinfo -h -N -n NODES -o '%N|%T|%E'` -> node -> condition (a node in several partitions once)."""
    found: dict[str, NodeCondition] = {}
    for line in sinfo_text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3 or not parts[0]:
            continue
        node, state, reason = parts
        found.setdefault(node, NodeCondition(node, state.rstrip(_NODE_STATE_FLAGS),
                                             "" if reason == "none" else reason))
    return found
