"""The only module that runs Slurm commands (argv lists, timeouts, never a shell).

Failures are mapped once: a timeout or an unreachable controller is temporary (retry later);
"Invalid job id" means the job is gone; a refusal of the operation is permanent.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import secrets
import time

from prometheus_client import Histogram

from relaunch.common.errors import PermanentError, TemporaryError

from ..domain.accounting import AccountedAttempt, available_fields, parse_sacct
from ..domain.commands import JOB_ID, NODE_NAME, check, drain_argv, step_argv
from ..domain.launches import BATCH_STEP_FIELDS, BatchStep, batch_step_of
from ..domain.node_facts import NodeFacts, facts_from_sinfo
from ..domain.observing import NodeCondition, Observed, parse_node_conditions
from ..domain.rest_values import job_of, observed_from_rest
from ..domain.slurm_values import Unreadable

log = logging.getLogger(__name__)

SLURM_SECONDS = Histogram("relaunch_slurm_command_seconds", "Latency of Slurm commands", ["command"])

_PERMANENT_MARKERS = (
    "Requested operation is presently disabled",
    "Job is no longer pending execution",
    "Access/permission denied",
    "Invalid node name",
)


class JobGone(PermanentError):
    pass


class AccountingDisabled(PermanentError):
    """The cluster keeps no job accounting (AccountingStorageType=accounting_storage/none)."""


def observed_or_retry(job: dict, job_id: str, seen: set[tuple[str, str]], source: str) -> Observed:
    """observed_from_rest, or a TemporaryError naming the field it could not read (logged once per job
    and field in `seen`): the Advice waits rather than act on a value nobody could read."""
    try:
        return observed_from_rest(job)
    except (Unreadable, TypeError, ValueError) as exc:
        field = getattr(exc, "field", type(exc).__name__)
        if (job_id, field) not in seen:
            if len(seen) > 10_000:
                seen.clear()
            seen.add((job_id, field))
            log.warning("job %s: %s field %r cannot be read (%s): nothing is done on this job until it can",
                        job_id, source, field, exc)
        raise TemporaryError(f"{source} of job {job_id}: {exc}; nothing is done on it", delay=5.0) from exc


class Slurm:
    def __init__(self, timeout_s: float = 15.0, env: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = env
        self._sacct_fields: tuple[str, ...] | None = None
        self._unreadable_seen: set[tuple[str, str]] = set()

    async def _run(self, argv: list[str]) -> str:
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=self.env if self.env is not None else os.environ.copy(),
            )
        except FileNotFoundError as exc:
            raise PermanentError(f"{argv[0]} is not installed: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=self.timeout_s)
        except TimeoutError as exc:
            # It may have ended in the meantime (seen: the actuator stopped with SIGSTOP past the timeout, its
            # command done and reaped when it went on): killing a process that is gone is no error.
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise TemporaryError(f"{' '.join(argv[:2])} timed out after {self.timeout_s}s", delay=2.0) from exc
        finally:
            SLURM_SECONDS.labels(argv[0] + (" " + argv[1] if argv[0] == "scontrol" else "")).observe(
                time.monotonic() - started)
        if proc.returncode != 0:
            text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip()
            if "Invalid job id" in text:
                raise JobGone(text)
            if "accounting storage is disabled" in text:
                raise AccountingDisabled(f"{argv[0]}: {text}")
            if any(marker in text for marker in _PERMANENT_MARKERS):
                raise PermanentError(f"{' '.join(argv)}: {text}")
            raise TemporaryError(f"{' '.join(argv)} failed (rc={proc.returncode}): {text}", delay=2.0)
        return out.decode(errors="replace")

    async def reachable(self) -> bool:
        """Whether slurmctld answers (`scontrol ping`): the actuator's leader steps down when it does
        not, for long (main.py)."""
        try:
            return " is UP" in await self._run(["scontrol", "ping"])
        except (TemporaryError, PermanentError):
            return False

    async def version(self) -> str:
        """The release of the Slurm clients in use ("24.11.5"), as `scontrol --version` prints it."""
        out = (await self._run(["scontrol", "--version"])).split()
        return out[-1] if out else "unknown"

    async def list_jobs(self) -> dict:
        """`squeue --json --states=all`: every job the controller still knows, recently finished ones
        included (plain `squeue --json` lists those on 22.05 only)."""
        out = await self._run(["squeue", "--json", "--states=all"])
        try:
            return json.loads(out)
        except json.JSONDecodeError as exc:
            raise TemporaryError(f"squeue --json printed something that is not JSON: {exc}") from exc

    async def show_job(self, job_id: str) -> dict | None:
        """The job's object in `squeue --json` (the shape slurmrestd gives too), or None when the
        controller no longer knows it. JSON, never `scontrol show job -o`: that text does not quote a
        job's name or comment, so a name "x Requeue=0" read as Slurm's own field (docs/slurm-versions.md).
        `scontrol --json` does not exist on 22.05, whose `squeue --json` ignores --jobs (job_of picks by id)."""
        argv = ["squeue", "--json", "--states=all", f"--jobs={check(JOB_ID, job_id, 'job id')}"]
        try:
            out = await self._run(argv)
        except JobGone:
            return None
        try:
            return job_of(json.loads(out), job_id)
        except (json.JSONDecodeError, Unreadable) as exc:
            raise TemporaryError(f"{' '.join(argv)}: {exc}", delay=2.0) from exc

    async def observe(self, job_id: str) -> Observed:
        """The job as the reconciler needs it. A field in a shape nobody knows is logged once and the
        job is not acted on: a TemporaryError (look again later), never a guess."""
        job = await self.show_job(job_id)
        if job is None:
            return Observed.gone()
        return observed_or_retry(job, job_id, self._unreadable_seen, "squeue --json")

    async def accounting_fields(self) -> tuple[str, ...]:
        """The sacct fields relaunch reads that this release prints (asked once)."""
        if self._sacct_fields is None:
            try:
                self._sacct_fields = available_fields(await self._run(["sacct", "--helpformat"]))
            except ValueError as exc:
                raise PermanentError(f"sacct: {exc}") from exc
            log.info("sacct fields: %s", ",".join(self._sacct_fields))
        return self._sacct_fields

    async def _sacct(self, *selection: str) -> list[AccountedAttempt]:
        fields = await self.accounting_fields()
        # A delimiter no job's name or comment can hold: made now, after every job was named (accounting.py).
        delimiter = f"\x1f{secrets.token_hex(8)}\x1f"
        return parse_sacct(await self._run(
            ["sacct", "-X", "-D", "-P", "-n", f"--delimiter={delimiter}", *selection, f"--format={','.join(fields)}"]),
            fields, delimiter)

    async def accounting(self, job_ids: list[str]) -> list[AccountedAttempt]:
        """Every accounting record (one per attempt) of these job ids, older jobs with the same id included."""
        return await self._sacct("-j", ",".join(check(JOB_ID, j, "job id") for j in job_ids))

    async def batch_step(self, job_id: str, submitted: dt.datetime) -> BatchStep | None:
        """The batch step of the job's attempt submitted at `submitted`, as accounting closed it (None:
        not recorded yet). It tells a launch Slurm refused from a script that ran (domain/launches.py)."""
        out = await self._run(["sacct", "-j", check(JOB_ID, job_id, "job id"), "-D", "-P", "-n",
                               f"--format={','.join(BATCH_STEP_FIELDS)}"])
        return batch_step_of(out, job_id, submitted)

    async def accounting_since(self, start: dt.datetime) -> list[AccountedAttempt]:
        """Every accounting record of a job that was pending, running or ended since `start`."""
        since = start.astimezone().strftime("%Y-%m-%dT%H:%M:%S")  # sacct reads local wall-clock time
        return await self._sacct("-a", "-S", since, "-E", "now")

    async def node_facts(self) -> NodeFacts:
        """Usable nodes per partition, each node's NodeAddr (%o), the nodes Slurm has given up on: one
        sinfo, whose text is the same on every release (domain/node_facts.py)."""
        return facts_from_sinfo(await self._run(["sinfo", "-h", "-N", "-o", "%R|%N|%t|%o"]))

    async def node_conditions(self, nodes: list[str]) -> dict[str, NodeCondition]:
        if not nodes:
            return {}
        names = ",".join(check(NODE_NAME, n, "node name") for n in nodes)
        return parse_node_conditions(await self._run(["sinfo", "-h", "-N", "-n", names, "-o", "%N|%T|%E"]))

    @staticmethod
    def drain_argv(node: str, reason: str) -> list[str]:
        return list(drain_argv(node, reason))

    async def drain(self, node: str, reason: str) -> None:
        await self._run(self.drain_argv(node, reason))

    @staticmethod
    def argv(step: str, job_id: str, nodes: list[str] | None = None) -> list[str]:
        """The command one reconcile step runs (domain/commands.py builds and checks it)."""
        return list(step_argv(step, job_id, nodes or ()))

    async def run_step(self, step: str, job_id: str, nodes: list[str] | None = None) -> None:
        await self._run(self.argv(step, job_id, nodes))

    async def run_command(self, argv: tuple[str, ...] | list[str]) -> None:
        """Run a command a reconcile plan carries (built and checked by domain/commands.py)."""
        await self._run(list(argv))
