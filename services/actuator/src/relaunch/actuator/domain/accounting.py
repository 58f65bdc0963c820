"""Slurm's job accounting (`sacct -P`), turned into attempts: pure parsing, written for Slurm 22.05.

Why sacct: slurmctld forgets a finished job MinJobAge seconds after it ends (then `squeue` and
`scontrol` say "Invalid job id"); the accounting database keeps one record per attempt for good.

Quirks worked around here:
- `sacct --json` reports wrong exit codes in 22.05.8, so we read `-P` text: `ExitCode` is "code:signal";
- `Comment` can contain the `|` separator, so it is requested last and the rest of the line is it;
- times are the controller's local wall-clock without a zone (they are read as this host's local time);
- **a requeue gives the job a new SubmitTime** and a new record: the requeued attempt's record ends
  (`End`) at the moment the next attempt is submitted. That link is how the records of one job are
  told apart from those of an older job that had the same id (after the controller's state was wiped);
- sacct has no restart counter: the attempt index is the record's place in that chain.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from relaunch.common.job_states import FINAL_STATES

from .hostlists import expand

SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "ExitCode", "Submit", "End", "NodeList", "Partition", "Comment")
"""The `--format` of every sacct call; Comment must stay last (it may contain '|')."""

REQUEUE_LINK = dt.timedelta(seconds=5)
"""A record whose End is this close to the next record's Submit was requeued into it (same job)."""
_ROUNDING = dt.timedelta(seconds=1)


@dataclass(frozen=True)
class AccountedAttempt:
    """One accounting record: one attempt of one job."""

    job_id: str
    name: str
    state: str
    exit_code: int | None
    submit: dt.datetime
    end: dt.datetime | None
    nodes: tuple[str, ...]
    partition: str
    comment: str

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def parse_sacct_time(value: str) -> dt.datetime | None:
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return dt.datetime.fromisoformat(value).astimezone(dt.UTC)  # naive: this host's local time
    except ValueError:
        return None


def parse_exit_code(value: str) -> int | None:
    """"3:0" -> 3 (the code); "0:9" -> 137 (killed by signal 9, as a shell reports it)."""
    code, sep, signal = value.partition(":")
    if not sep:
        return None
    try:
        code_n, signal_n = int(code), int(signal)
    except ValueError:
        return None
    return 128 + signal_n if signal_n else code_n


def parse_sacct(text: str) -> list[AccountedAttempt]:
    """`sacct -X -D -P -n --format=<SACCT_FIELDS>` -> records, in the order sacct printed them.

    A line that does not parse (too few fields, no submit time) is skipped: sacct prints nothing else
    on stdout with -n, and one odd record must not hide the others.
    """
    records = []
    n = len(SACCT_FIELDS)
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) < n:
            continue
        job_id, name, state, exit_code, submit, end, nodes, partition, comment = parts
        submitted = parse_sacct_time(submit)
        if submitted is None or not job_id.strip():
            continue
        try:
            node_list = tuple(expand(nodes)) if nodes not in ("", "None assigned", "(null)") else ()
        except ValueError:
            node_list = ()
        records.append(AccountedAttempt(
            job_id=job_id.strip(), name=name, state=(state.split() or [""])[0],  # "CANCELLED by 0"
            exit_code=parse_exit_code(exit_code), submit=submitted, end=parse_sacct_time(end),
            nodes=node_list, partition=partition, comment=comment,
        ))
    return records


def job_chain(records: list[AccountedAttempt], job_id: str, before: dt.datetime | None = None
              ) -> list[AccountedAttempt]:
    """The attempts of the newest job with this id (submitted at or before `before`), oldest first.

    Walking back from the newest record, an older record belongs to the same job only when it was
    requeued into the next one (its End within REQUEUE_LINK of the next Submit); the first record that
    is not ends an older job that happened to have the same id.
    """
    mine = sorted((r for r in records if r.job_id == job_id
                   and (before is None or r.submit <= before + _ROUNDING)), key=lambda r: r.submit)
    if not mine:
        return []
    chain = [mine[-1]]
    for record in reversed(mine[:-1]):
        nxt = chain[-1]
        if record.end is None or abs(nxt.submit - record.end) > REQUEUE_LINK:
            break
        chain.append(record)
    chain.reverse()
    return chain
