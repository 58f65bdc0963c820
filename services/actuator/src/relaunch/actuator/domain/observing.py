"""Turning Slurm's output into values: pure parsing, for Slurm 22.05 through 26.05.

Quirks worked around here (docs/slurm-versions.md):
- every fact about a job is read from Slurm's JSON (`squeue --json`, slurmrestd's jobs), never from
  `scontrol show job -o`: that text prints a job's name right after JobId and its comment before
  StdOut without quoting either, so a name such as "x Requeue=0" or a comment holding
  "StdOut=/etc/shadow" read like Slurm's own fields there. In JSON a user's text is one string value.
- `squeue --json` changed shape after 22.05 (states as lists with flags, numbers as
  {set, infinite, number}, exit codes as objects): slurm_values.py reads both. `standard_output` is
  a pattern on 22.05 and 26.05 (`%x-%j.out`) and expanded on 24.11: output_paths_of expands it the
  way Slurm does.
- plain `squeue --json` lists finished jobs on 22.05 only; `--states=all` lists them on every release.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from relaunch.common.job_states import FINAL_STATES
from relaunch.common.optin import parse_comment

from .accounting import expand_pattern
from .hostlists import expand
from .slurm_values import Unreadable, exit_code, integer, job_state, number, text

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9/:_]*=")
HELD_REASONS = frozenset({"job_requeued_in_held_state", "JobHeldAdmin", "JobHeldUser"})
NOT_HOLDS = frozenset({"BadConstraints", "PartitionNodeLimit", "PartitionConfig", "PartitionTimeLimit"})
"""Reasons Slurm gives with Priority=0 to a job it will not start (not a hold: startability.py)."""


def parse_scontrol_line(line: str) -> dict[str, str]:
    """`scontrol show job -o` text as key -> value, first key wins. **Never read by relaunch itself**
    (the module docstring says why: a job's name or comment can shadow any later key); kept for the
    end-to-end tests' helper (tests/e2e/slurmjobs.py), which reads its own jobs' fields."""
    fields: dict[str, str] = {}
    key = None
    for token in line.strip().split(" "):
        if _KEY.match(token):
            key, _, value = token.partition("=")
            fields.setdefault(key, value)
        elif key is not None and token:
            fields[key] += " " + token
    return fields


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
    required: tuple[str, ...] = ()
    """ReqNodeList (sbatch -w): nodes the job must run on, so never excludable (startability.py)."""
    num_nodes: int | None = None
    """NumNodes, the least the job asks for ("2-2" -> 2)."""
    submitted: dt.datetime | None = None
    """This attempt's SubmitTime (a requeue sets it: startability.py, the credential rule)."""
    started: dt.datetime | None = None
    ended: dt.datetime | None = None
    exit_code: str = ""
    """`code:signal` as scontrol prints it, e.g. "1:0" (rest_values._code_signal)."""

    @classmethod
    def gone(cls) -> Observed:
        return cls(exists=False)


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
    stdout: str = ""
    """Where the job's output goes, expanded as Slurm expands it (output_paths_of); '' when unknown."""
    stderr: str = ""
    user_id: int | None = None
    """The job's owner and primary group, and its working directory ('' unknown): the detector reads
    a job's output only where this user could."""
    group_id: int | None = None
    work_dir: str = ""

    def change_key(self) -> tuple:
        return (self.state, self.reason, self.restarts, self.nodes, self.exit_code)


@dataclass(frozen=True)
class UnreadableField:
    """A field of one job the adapter could not read (logged once per job and field, counted)."""

    job_id: str
    field: str
    shape: str
    consequence: str
    """What the observer does instead: "job not observed" or "left out"."""


@dataclass(frozen=True)
class Listing:
    """What one `squeue --json` said: the opted-in jobs, every job id it listed, what was unreadable."""

    jobs: tuple[SqueueJob, ...]
    listed: frozenset[str]
    unreadable: tuple[UnreadableField, ...] = ()


_ESSENTIAL = ("job_state", "restart_cnt")
"""Without these a job is not observed at all: its state decides everything, its restart counter is
the idempotency record of every restart (reconciling.py)."""


def read_listing(squeue_json: dict) -> Listing:
    """The opted-in jobs of a `squeue --json` listing, from any release (malformed options included:
    the decider explains). A job with a field in a shape nobody knows is observed without that field
    when the field is not essential, and not at all when it is; either way the listing goes on."""
    entries = squeue_json.get("jobs") if isinstance(squeue_json, dict) else None
    if not isinstance(entries, list):
        raise Unreadable("jobs", entries)
    jobs: list[SqueueJob] = []
    listed: set[str] = set()
    problems: list[UnreadableField] = []
    for entry in entries:
        if not isinstance(entry, dict):
            problems.append(UnreadableField("?", "jobs[]", Unreadable("jobs[]", entry).shape, "job not observed"))
            continue
        try:
            job_id = str(integer(entry.get("job_id"), "job_id"))
        except Unreadable as exc:
            problems.append(UnreadableField("?", "job_id", exc.shape, "job not observed"))
            continue
        listed.add(job_id)
        job, missing = _read_job(job_id, entry)
        problems.extend(missing)
        if job is not None:
            jobs.append(job)
    return Listing(tuple(jobs), frozenset(listed), tuple(problems))


def _no_reason(reason: str) -> str:
    return "" if reason == "None" else reason


def _read_job(job_id: str, entry: dict) -> tuple[SqueueJob | None, list[UnreadableField]]:
    missing: list[UnreadableField] = []

    def read(field: str, reader, default):
        try:
            return reader(entry.get(field), field)
        except Unreadable as exc:
            essential = field in _ESSENTIAL
            missing.append(UnreadableField(job_id, exc.field, exc.shape,
                                           "job not observed" if essential else "left out"))
            return None if essential else default

    try:
        comment = text(entry.get("comment"), "comment")
    except Unreadable:
        return None, missing  # a comment we cannot read does not opt anything in
    if not parse_comment(comment).opted_in:
        return None, missing
    state = read("job_state", job_state, None)
    restarts = read("restart_cnt", integer, None)
    if state is None or restarts is None:
        return None, missing
    node_text = read("nodes", text, "")
    try:
        nodes = tuple(expand(node_text))
    except ValueError:
        nodes = ()
    code = read("exit_code", exit_code, None) if state[0] in FINAL_STATES else None
    submitted = read("submit_time", number, None)
    try:
        stdout, stderr = output_paths_of(entry)
    except Unreadable as exc:
        missing.append(UnreadableField(job_id, exc.field, exc.shape, "left out"))
        stdout = stderr = ""
    return SqueueJob(
        job_id=job_id,
        name=read("name", text, ""),
        state=state[0],
        # Slurm writes "None" when a job has no reason; relaunch's readers (the API, the ledger) get "".
        reason=_no_reason(read("state_reason", text, "")),
        restarts=restarts,
        nodes=nodes,
        comment=comment,
        partition=read("partition", text, ""),
        exit_code=code,
        submitted=_epoch(submitted),
        stdout=stdout,
        stderr=stderr,
        user_id=read("user_id", number, None),
        group_id=read("group_id", number, None),
        work_dir=read("current_working_directory", text, ""),
    ), missing


def output_paths_of(job: dict) -> tuple[str, str]:
    """(stdout, stderr) of a listed job (squeue --json, slurmrestd), expanded as Slurm expands the
    pattern ('' where it cannot be); stderr is stdout when the job names none. Unreadable when a
    field it needs has a shape nobody knows."""
    job_id = str(job.get("job_id", ""))
    hosts = text(job.get("nodes"), "nodes")
    try:
        nodes = expand(hosts) if hosts not in ("", "(null)", "None assigned") else []
    except ValueError as exc:
        raise Unreadable("nodes", hosts) from exc
    values = {"j": job_id, "J": job_id, "A": job_id, "x": text(job.get("name"), "name"),
              "u": text(job.get("user_name"), "user_name"), "N": nodes[0] if nodes else "", "n": "0", "t": "0",
              "s": "batch"}
    workdir = text(job.get("current_working_directory"), "current_working_directory")
    out = text(job.get("standard_output"), "standard_output")
    err = text(job.get("standard_error"), "standard_error")
    stdout = expand_pattern(out or "slurm-%j.out", values, workdir)
    return stdout, (expand_pattern(err, values, workdir) if err else stdout)


def opted_in_jobs(squeue_json: dict) -> list[SqueueJob]:
    """The opted-in jobs of a listing (read_listing without the rest)."""
    return list(read_listing(squeue_json).jobs)


def _epoch(value: int | None) -> dt.datetime | None:
    if value is None or value <= 0:
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
    def down(self) -> bool:
        """DOWN (Slurm's own, an operator's or relaunch's), with or without its not-responding '*'."""
        return "down" in self.state.lower()

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
