"""The only module that runs Slurm commands (argv lists, timeouts, never a shell).

Failures are mapped once: a timeout or an unreachable controller is temporary (retry later);
"Invalid job id" means the job is gone; a refusal of the operation is permanent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

from prometheus_client import Histogram

from relaunch.common.errors import PermanentError, TemporaryError

from ..domain.observing import Observed, observed_from_scontrol, parse_scontrol_line

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


class Slurm:
    def __init__(self, timeout_s: float = 15.0, env: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = env

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
            if any(marker in text for marker in _PERMANENT_MARKERS):
                raise PermanentError(f"{' '.join(argv)}: {text}")
            raise TemporaryError(f"{' '.join(argv)} failed (rc={proc.returncode}): {text}", delay=2.0)
        return out.decode(errors="replace")

    async def list_jobs(self) -> dict:
        """`squeue --json`: every job the controller still knows, including recently finished ones."""
        out = await self._run(["squeue", "--json"])
        try:
            return json.loads(out)
        except json.JSONDecodeError as exc:
            raise TemporaryError(f"squeue --json printed something that is not JSON: {exc}") from exc

    async def show_job(self, job_id: str) -> dict[str, str] | None:
        try:
            out = await self._run(["scontrol", "show", "job", "-o", job_id])
        except JobGone:
            return None
        lines = [line for line in out.splitlines() if line.startswith("JobId=")]
        return parse_scontrol_line(lines[0]) if lines else None

    async def observe(self, job_id: str) -> Observed:
        fields = await self.show_job(job_id)
        return Observed.gone() if fields is None else observed_from_scontrol(fields)

    @staticmethod
    def argv(step: str, job_id: str, nodes: list[str] | None = None) -> list[str]:
        """The command one reconcile step runs (also what observe mode records)."""
        commands = {
            "requeuehold": ["scontrol", "requeuehold", job_id],
            "release": ["scontrol", "release", job_id],
            "start_now": ["scontrol", "update", f"JobId={job_id}", "StartTime=now"],
            "exclude": ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(nodes or [])}"],
            "cancel": ["scancel", job_id],
        }
        return commands[step]

    async def run_step(self, step: str, job_id: str, nodes: list[str] | None = None) -> None:
        await self._run(self.argv(step, job_id, nodes))
