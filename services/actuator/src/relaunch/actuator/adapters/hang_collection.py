"""Runs the hang collector (rank_collector.py) on every node of a hung job with srun, at once, within one
time budget (docs/architecture.md, "Hang evidence"). The only place the actuator steps into a job.

A node that does not answer in time has its srun killed (Slurm then ends that one-task step; the job's
own steps are untouched: --overlap shares their resources, it does not take them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from ..domain.hang_readings import NodeOutput, collector_argv

SCRIPT = (Path(__file__).with_name("rank_collector.py")).read_text()
MAX_OUTPUT = 1_000_000
"""Bytes read of one node's output (the collector cuts each rank's dump to 12,000 characters)."""


async def _one(job_id: str, node: str, python: str, pyspy: str, timeout_s: float) -> NodeOutput:
    argv = collector_argv(job_id, node, python, SCRIPT, pyspy)
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, env=os.environ.copy())
    except OSError as exc:
        return node, None, f"srun could not be run: {exc}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):  # it may have ended in the meantime
            proc.kill()
        await proc.wait()
        return node, None, f"no answer within {timeout_s:.0f} s"
    if proc.returncode != 0:
        return node, None, f"srun exited {proc.returncode}: {err.decode(errors='replace').strip()[-300:]}"
    return node, out[:MAX_OUTPUT].decode(errors="replace"), ""


async def collect(job_id: str, nodes: list[str], python: str, pyspy: str, timeout_s: float) -> list[NodeOutput]:
    """Every node's collector output (or why there is none), in `nodes` order, within `timeout_s`."""
    return list(await asyncio.gather(*(_one(job_id, n, python, pyspy, timeout_s) for n in nodes)))
