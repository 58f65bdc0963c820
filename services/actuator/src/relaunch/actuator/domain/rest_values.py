"""Slurm's JSON job objects, and slurmrestd's other answers, turned into values (pure).

A job object is the same in `squeue --json` (either adapter's listing, and the CLI adapter's
observe(), docs/slurm-versions.md) and in `GET /slurm/V/job/J` (the same data_parser prints both):
observing.read_listing and observed_from_rest read it on every release. The rest is mapped onto the
values `sinfo` and `sacct` give: NodeCondition, AccountedAttempt.

Quirks (seen on 22.05.8, and Debian's 24.11.5 and 26.05.5; docs/slurm-versions.md):
- a requeue-held job shows `state_reason: JobHeldUser` and `state_description: job requeued in held
  state` (scontrol's Reason `job_requeued_in_held_state`, which is what is read); 24.11 and later add
  `hold: true`, which they print for any Priority 0, a job Slurm will never start included;
- 22.05 prints exit codes as raw wait status, has no `hold`, and its `squeue --json` ignores --jobs;
- `standard_output` is expanded on 24.11 and a pattern (`%x-%j.out`) on 22.05 and 26.05: it is
  expanded the way sacct's patterns are (observing.output_paths_of, accounting.expand_pattern);
- unset times are 0 or `{"set": false}`; an accounting record's comment is an object
  (`{"job": ..., "administrator": ..., "system": ...}`), its state `{"current": [...], "reason": ...}`;
- errors come as `{"errors": [{"error": "Invalid job id specified", "error_number": 2017, ...}]}`
  with the same texts as the commands print.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from .accounting import AccountedAttempt, expand_pattern
from .hostlists import expand
from .node_facts import NodeFacts, down_in_rest
from .observing import HELD_REASONS, NOT_HOLDS, NodeCondition, Observed, USABLE_NODE_STATES, output_paths_of
from .slurm_values import Unreadable, exit_code, job_state, number, text


__all__ = ["accounted_from_rest", "error_text", "facts_from_rest", "first_job", "job_of", "node_conditions_from", "observed_from_rest",
           "output_paths_of", "usable_nodes_from"]


def first_job(answer: dict) -> dict | None:
    """The job of a `GET /slurm/V/job/J` answer, or None when it lists none."""
    jobs = answer.get("jobs") if isinstance(answer, dict) else None
    if not isinstance(jobs, list):
        raise Unreadable("jobs", jobs)
    return jobs[0] if jobs and isinstance(jobs[0], dict) else None


def job_of(answer: dict, job_id: str) -> dict | None:
    """The job with this id in a listing (`squeue --json --states=all --jobs=J`), or None when it is
    not listed. Picked by id, never by position: 22.05's `squeue --json` ignores `--jobs` and lists
    every job the controller knows."""
    jobs = answer.get("jobs") if isinstance(answer, dict) else None
    if not isinstance(jobs, list):
        raise Unreadable("jobs", jobs)
    for job in jobs:
        if isinstance(job, dict) and str(job.get("job_id")) == job_id:
            return job
    return None


def _when(value: Any, field: str) -> dt.datetime | None:
    n = number(value, field) if value is not None else None
    return dt.datetime.fromtimestamp(n, dt.UTC) if n and n > 0 else None


def _hosts(value: Any, field: str) -> tuple[str, ...]:
    hosts = text(value, field)
    if hosts in ("", "(null)", "None assigned"):
        return ()
    try:
        return tuple(expand(hosts))
    except ValueError as exc:
        raise Unreadable(field, value) from exc


def _code_signal(value: Any) -> str:
    """An exit code as scontrol prints it ("1:0", "0:9"), from 22.05's raw wait status (256, 9) or a
    later release's object; '' when absent."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{(value >> 8) & 0xFF}:{value & 0x7F}"
    if not isinstance(value, dict):
        raise Unreadable("exit_code", value)
    code = number(value.get("return_code", {"set": False, "number": 0}), "exit_code.return_code") or 0
    signal = value.get("signal") or {}
    sig = number(signal.get("id", {"set": False, "number": 0}), "exit_code.signal.id") if isinstance(signal, dict) else 0
    return f"{code}:{sig or 0}"


def observed_from_rest(job: dict) -> Observed:
    """A job of `squeue --json` or `GET /slurm/V/job/J`, any release, as the reconciler sees it.
    Raises Unreadable (never guesses) when a field it reads has a shape nobody knows."""
    state, _flags = job_state(job.get("job_state"))
    # scontrol's Reason, as the reconciler has always read it: Slurm's description where it has one
    # (whitespace made '_': "job_requeued_in_held_state", "ReqNodeNotAvail,_UnavailableNodes:node3"),
    # else the reason's name (tests/unit/test_slurm_releases.py checks both against scontrol's text).
    described = text(job.get("state_description"), "state_description")
    reason = re.sub(r"\s", "_", described) if described else text(job.get("state_reason"), "state_reason")
    priority = number(job.get("priority"), "priority") if job.get("priority") is not None else None
    # Priority 0 is a hold, except on a job Slurm has given up on: it sets Priority 0 with
    # Reason=BadConstraints too, and releasing that changes nothing. 24.11 and later print `hold: true`
    # for any Priority 0, that job included (tests/fixtures/slurm/*/show-job.json, "badconstraints").
    held = state == "PENDING" and reason.split(",", 1)[0] not in NOT_HOLDS and (
        job.get("hold") is True or reason in HELD_REASONS or priority == 0)
    count = job.get("node_count")
    return Observed(
        exists=True,
        state=state,
        reason=reason,
        restarts=number(job.get("restart_cnt"), "restart_cnt") or 0,
        held=held,
        eligible_at=_when(job.get("eligible_time"), "eligible_time"),
        excluded=_hosts(job.get("excluded_nodes"), "excluded_nodes"),
        nodes=_hosts(job.get("nodes"), "nodes"),
        requeue_allowed=job.get("requeue", True) is not False,
        partition=text(job.get("partition"), "partition"),
        required=_hosts(job.get("required_nodes"), "required_nodes"),
        num_nodes=number(count, "node_count") if count is not None else None,
        submitted=_when(job.get("submit_time"), "submit_time"),
        started=_when(job.get("start_time"), "start_time"),
        # A pending job's end_time is Slurm's estimate (start + time limit); scontrol says Unknown.
        ended=None if state == "PENDING" else _when(job.get("end_time"), "end_time"),
        exit_code=_code_signal(job.get("exit_code")),
    )


def _node_state(node: dict) -> tuple[str, ...]:
    state = node.get("state")
    if isinstance(state, str):
        return (state,)
    if isinstance(state, list) and all(isinstance(s, str) for s in state):
        return tuple(state)
    raise Unreadable("state", state)


_SHORT = {"IDLE": "idle", "MIXED": "mix", "ALLOCATED": "alloc", "COMPLETING": "comp", "RESERVED": "resv",
          "PLANNED": "plnd"}
_UNUSABLE_FLAGS = frozenset({"DRAIN", "NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "FAIL",
                             "MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "DOWN"})


def usable_nodes_from(nodes_answer: dict) -> dict[str, int]:
    """`GET /slurm/V/nodes/` -> partition -> how many of its nodes can run jobs now (as sinfo's %t says)."""
    usable: dict[str, int] = {}
    for node in nodes_answer.get("nodes") or []:
        states = _node_state(node)
        ok = any(_SHORT.get(s) in USABLE_NODE_STATES for s in states) and not (set(states) & _UNUSABLE_FLAGS)
        for partition in node.get("partitions") or []:
            usable.setdefault(partition, 0)
            usable[partition] += 1 if ok else 0
    return usable


def facts_from_rest(nodes_answer: dict) -> NodeFacts:
    """`GET /slurm/V/nodes/` -> NodeFacts (node_facts.py): usable nodes per partition, each node's
    `address` (its NodeAddr), and the nodes whose state says DOWN, FAIL or NOT_RESPONDING."""
    addrs: dict[str, str] = {}
    down: set[str] = set()
    for node in nodes_answer.get("nodes") or []:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            continue
        address = node.get("address")
        if isinstance(address, str) and address:
            addrs[name] = address
        if down_in_rest(_node_state(node)):
            down.add(name)
    return NodeFacts(usable_nodes_from(nodes_answer), addrs, frozenset(down))


def node_conditions_from(nodes_answer: dict, wanted: list[str]) -> dict[str, NodeCondition]:
    """`GET /slurm/V/nodes/` -> node -> condition, for the nodes asked about; "drained"/"draining"
    where DRAIN is set (what sinfo's %T says: drained when idle, draining while jobs still run)."""
    found: dict[str, NodeCondition] = {}
    for node in nodes_answer.get("nodes") or []:
        name = node.get("name")
        if name not in wanted:
            continue
        states = _node_state(node)
        base = states[0].lower() if states else "unknown"
        if "DRAIN" in states:
            base = "drained" if base in ("idle", "down") else "draining"
        found[name] = NodeCondition(name, base, text(node.get("reason"), "reason"))
    return found


def accounted_from_rest(answer: dict) -> list[AccountedAttempt]:
    """`GET /slurmdb/V/jobs/` or `/slurmdb/V/job/J` -> one record per attempt, as parse_sacct gives them.
    A record that cannot be read (no submit time, an unknown state shape) is skipped, as sacct lines are."""
    records = []
    for job in answer.get("jobs") or []:
        try:
            records.append(_accounted(job))
        except (Unreadable, KeyError, TypeError, ValueError):
            continue
    return records


def _accounted(job: dict) -> AccountedAttempt:
    times = job.get("time") or {}
    submit = _when(times.get("submission"), "time.submission")
    if submit is None:
        raise ValueError("no submit time")
    state = job.get("state") or {}
    current = job_state(state.get("current") if isinstance(state, dict) else state, "state.current")[0]
    comment = job.get("comment")
    comment = comment.get("job") or "" if isinstance(comment, dict) else text(comment, "comment")
    job_id = str(job["job_id"])
    nodes = _hosts(job.get("nodes"), "nodes")
    values = {"j": job_id, "J": job_id, "A": job_id, "x": text(job.get("name"), "name"),
              "u": text(job.get("user"), "user"), "N": nodes[0] if nodes else "", "n": "0", "t": "0", "s": "batch"}
    workdir = text(job.get("working_directory"), "working_directory")
    out, err = text(job.get("stdout"), "stdout"), text(job.get("stderr"), "stderr")
    stdout = text(job.get("stdout_expanded"), "stdout_expanded") or expand_pattern(out or "slurm-%j.out", values,
                                                                                   workdir)
    stderr = text(job.get("stderr_expanded"), "stderr_expanded") or (
        expand_pattern(err, values, workdir) if err else stdout)
    restarts = job.get("restart_cnt")
    return AccountedAttempt(
        job_id=job_id, name=text(job.get("name"), "name"), state=current,
        exit_code=exit_code(job.get("exit_code")), submit=submit, end=_when(times.get("end"), "time.end"),
        nodes=nodes, partition=text(job.get("partition"), "partition"), comment=comment,
        restarts=restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else None,
        stdout=stdout, stderr=stderr, work_dir=workdir,
        # slurmdbd's records name the user and group, with no ids: the adapter looks them up.
        user_name=text(job.get("user"), "user"), group_name=text(job.get("group"), "group"),
    )


def error_text(answer: Any) -> str:
    """The errors slurmrestd reported, joined ('' when none)."""
    errors = answer.get("errors") if isinstance(answer, dict) else None
    if not isinstance(errors, list):
        return ""
    parts = []
    for e in errors:
        if isinstance(e, dict):
            parts.append("; ".join(str(e[k]) for k in ("error", "description") if e.get(k)))
    return " | ".join(p for p in parts if p)
