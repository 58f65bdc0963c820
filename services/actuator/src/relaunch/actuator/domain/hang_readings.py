"""The hang collector's output (adapters/rank_collector.py, one JSON object per node) -> rank readings ->
HangEvidence with the attribution of relaunch.common.hangs (docs/architecture.md, "Hang evidence"). Pure.

Invariants:
- fail closed: a node whose collector failed, printed no JSON or found no rank adds no reading, only a
  line to `detail`; the attribution then has less to go on and blames no one rather than a guess;
- the srun command is an argv list with the job id and node name checked (commands.check), like every
  Slurm command the actuator runs.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from relaunch.common.hangs.attribution import attribute
from relaunch.common.hangs.stacks import ProcSample, RankReading, parse_stat
from relaunch.common.schemas import AnomalyDetected, HangEvidence, RankEvidence

from .commands import JOB_ID, NODE_NAME, check

NodeOutput = tuple[str, str | None, str]
"""(node, the collector's stdout or None, an error in words)."""


def collector_argv(job_id: str, node: str, python: str, script: str, pyspy: str) -> list[str]:
    """A one-task step on `node` inside the running job, beside its steps (--overlap), that runs the
    collector's text with the node's python: isolated (-I: no PYTHON* variables, no user site, not the
    working directory on sys.path) and in / (--chdir), so no file of the job's can stand in for a module."""
    return ["srun", "--overlap", f"--jobid={check(JOB_ID, job_id, 'job id')}", "-w", check(NODE_NAME, node, "node name"),
            "-N1", "-n1", "--quiet", "--chdir=/", python, "-I", "-c", script, job_id, pyspy]


def _reading(node: str, r: dict) -> RankReading:
    proc = None
    stat = r.get("stat") or []
    if len(stat) == 2 and stat[0] and stat[1]:
        try:
            (_, before), (state, after) = parse_stat(stat[0]), parse_stat(stat[1])
            proc = ProcSample(state, max(0, after - before), float(r.get("interval_s", 0.5)),
                              int(r.get("blocked_threads", 0)))
        except (IndexError, ValueError):
            proc = None
    return RankReading(int(r["rank"]), node, int(r["pid"]), r.get("dump") or None, proc, error=str(r.get("error", "")))


def readings_from(outputs: Sequence[NodeOutput]) -> tuple[list[RankReading], list[str]]:
    """The ranks every node's collector read, and what went wrong where."""
    readings, problems = [], []
    for node, stdout, error in outputs:
        if stdout is None:
            problems.append(f"{node}: {error or 'no output'}")
            continue
        try:
            body = json.loads(stdout.strip().splitlines()[-1])
            found = [_reading(node, r) for r in body["ranks"]]
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"{node}: the collector's output is not its JSON ({type(exc).__name__})")
            continue
        if not found:
            problems.append(f"{node}: no rank process of the job found")
        readings.extend(found)
    readings.sort(key=lambda r: r.rank)
    return readings, problems


def evidence(anomaly: AnomalyDetected, outputs: Sequence[NodeOutput], elapsed_s: float,
             now: dt.datetime) -> HangEvidence:
    readings, problems = readings_from(outputs)
    if not readings:
        return unavailable(anomaly, "; ".join(problems) or "no node read", now, elapsed_s)
    verdict = attribute(readings)
    ranks = [RankEvidence(
        rank=v.reading.rank, node=v.reading.node, pid=v.reading.pid, role=v.role, where=v.where.kind,
        collective=v.where.collective, place=v.where.place, call=v.where.call,
        state=v.reading.proc.state if v.reading.proc else "",
        cpu_ticks=v.reading.proc.cpu_ticks if v.reading.proc else None,
        frames=[str(f)[:300] for f in v.where.frames], error=v.reading.error[:300],
        dump_mode="native" if any(f.native for f in v.where.frames) else ("nonblocking" if v.reading.dump else ""),
    ) for v in verdict.ranks]
    return HangEvidence(
        anomaly_id=anomaly.anomaly_id, cluster=anomaly.cluster, job_id=anomaly.job_id, attempt=anomaly.attempt,
        status="collected", detail="; ".join(problems)[:2000], blame=verdict.blame, victims=list(verdict.victims),
        suspects=list(verdict.suspects), suspect_nodes=list(verdict.suspect_nodes), place=verdict.place,
        reason=verdict.reason[:2000], ranks=ranks, elapsed_s=round(elapsed_s, 3), collected_at=now)


def unavailable(anomaly: AnomalyDetected, detail: str, now: dt.datetime, elapsed_s: float = 0.0,
                status: str = "unavailable") -> HangEvidence:
    """No evidence (status "unavailable"), or none sought (status "skipped"): the hang is handled as without."""
    return HangEvidence(anomaly_id=anomaly.anomaly_id, cluster=anomaly.cluster, job_id=anomaly.job_id,
                        attempt=anomaly.attempt, status=status, detail=detail[:2000],
                        reason="no evidence: " + detail[:500], elapsed_s=round(elapsed_s, 3), collected_at=now)
