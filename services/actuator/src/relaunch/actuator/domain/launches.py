"""Did an attempt's batch script run? Slurm's accounting of its batch step says so. Pure parsing.

Why the batch step, and not the time an attempt took: slurmctld builds the batch step of every attempt
it launches (build_batch_step, before it sends the launch to slurmd), and how that step ends tells who
ended it (reproduced on 22.05.8, tests/e2e/test_fast_failures.py):
- the script ran and exited 1 (at once or not): slurmstepd reports the script's status, and sacct shows
  `J.batch FAILED 1:0`;
- slurmd refused the launch ("error: Job N already killed, do not launch batch job", its credential
  revoked): no slurmstepd ever ran the step; slurmctld ends the job with job_complete() ("Killing
  non-startable batch JobId=N: Job credential revoked") and closes the step itself: `J.batch
  CANCELLED` with no exit code, while the job's own record says `FAILED 1:0`, exactly as a script's
  `exit 1` would.
A script that fails within a second of its requeue also "started and ended in the second of its
requeue with 1:0": timing alone never tells the two apart, the batch step does.

`sacct -D` lists every attempt of a job, each followed by its steps; an attempt is picked by its
SubmitTime (a requeue gives each attempt a new one), read as this host's local time like every sacct time.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from .accounting import parse_sacct_time
from .slurm_values import Unreadable, job_state, number, text

BATCH_STEP_FIELDS = ("JobIDRaw", "State", "ExitCode", "Submit")
"""What `sacct -j J -D -P -n` is asked for (no user text among them: `|` cannot occur in a value)."""


@dataclass(frozen=True)
class BatchStep:
    """The batch step of one attempt, as Slurm's accounting closed it."""

    state: str
    """"FAILED", "CANCELLED", "COMPLETED", "RUNNING"... (sacct's first word: "CANCELLED by 0" -> CANCELLED)."""
    exit_code: str = ""
    """"1:0" as sacct prints it; '' when Slurm recorded none (a step no slurmstepd ran)."""

    @property
    def never_ran(self) -> bool:
        """slurmctld closed the step itself: no slurmstepd ran it, so the script never started."""
        return self.state == "CANCELLED" and self.exit_code in ("", "0:0")


def batch_step_of(sacct_text: str, job_id: str, submitted: dt.datetime) -> BatchStep | None:
    """`sacct -j J -D -P -n --format=JobIDRaw,State,ExitCode,Submit` -> the batch step of the attempt
    submitted in `submitted`'s second, or None when accounting has no such step (yet)."""
    wanted = submitted.astimezone(dt.UTC).replace(microsecond=0)
    current: dt.datetime | None = None
    found: BatchStep | None = None
    for line in sacct_text.splitlines():
        parts = line.split("|")
        if len(parts) < len(BATCH_STEP_FIELDS):
            continue
        jid, state, code, submit = (p.strip() for p in parts[:4])
        if jid == job_id:
            current = parse_sacct_time(submit)
        elif jid == f"{job_id}.batch" and current is not None and current.replace(microsecond=0) == wanted:
            found = BatchStep((state.split() or [""])[0], code)
    return found


def batch_step_from_rest(answer: dict, job_id: str, submitted: dt.datetime) -> BatchStep | None:
    """`GET /slurmdb/V/job/J` -> the batch step of the attempt submitted in `submitted`'s second (None:
    none recorded, or in a shape nobody knows: then nothing is concluded from it)."""
    wanted = int(submitted.timestamp())
    for job in (answer.get("jobs") if isinstance(answer, dict) else None) or []:
        try:
            if str(job.get("job_id")) != job_id or number((job.get("time") or {}).get("submission"), "time") != wanted:
                continue
            for step in job.get("steps") or []:
                name = text((step.get("step") or {}).get("name"), "step.name")
                if name != "batch" and not str((step.get("step") or {}).get("id", "")).endswith(".batch"):
                    continue
                state = job_state((step.get("state")), "state")[0]
                return BatchStep(state, _rest_code(step.get("exit_code")))
        except (Unreadable, AttributeError, TypeError, ValueError):
            continue
    return None


def _rest_code(value: Any) -> str:
    """slurmdbd's step exit code ({"status": [...], "return_code": {...}, "signal": {...}}) as "code:signal",
    '' when it records none (status PENDING: the step never reported one)."""
    if not isinstance(value, dict):
        return ""
    status = value.get("status")
    if status == ["PENDING"] or status == "PENDING" or value.get("return_code") is None:
        return ""
    code = number(value.get("return_code"), "exit_code.return_code") or 0
    signal = value.get("signal") or {}
    sig = number(signal.get("id"), "exit_code.signal.id") if isinstance(signal, dict) and "id" in signal else 0
    return f"{code}:{sig or 0}"
