"""Pure detection: log batches and scheduler observations -> AnomalyDetected (time passed in).

One anomaly per job attempt: its id is `<cluster>.<job>.<attempt>.crash`, so a replay or a second
detector publishing the same finding is deduplicated by JetStream and by the decider.
"""

from __future__ import annotations

import datetime as dt

from relaunch.common.schemas import AnomalyDetected, EvidenceLine, JobObserved, LogBatch

from .signatures import Match, Signature, root_cause, scan

FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"})

_SCHEDULER_FALLBACK = {
    # state: (category, fault_domain, action, summary)
    "FAILED": ("scheduler_failed", "unknown", "restart", "the job failed and no log line explains why"),
    "NODE_FAIL": ("slurm_node_failure", "infrastructure", "restart_excluding", "a node of the job failed"),
    "TIMEOUT": ("slurm_time_limit", "scheduler", "restart", "the job reached its time limit"),
    "OUT_OF_MEMORY": ("host_oom_kill", "resource", "stop", "the job ran out of host memory"),
    "BOOT_FAIL": ("slurm_node_failure", "infrastructure", "restart", "a node failed to boot for the job"),
    "DEADLINE": ("slurm_deadline", "scheduler", "stop", "the job reached its deadline"),
    "PREEMPTED": ("slurm_preempted", "scheduler", "restart", "the job was preempted"),
}


def anomaly_id(cluster: str, job_id: str, attempt: int) -> str:
    return f"{cluster}.{job_id}.{attempt}.crash"


def crash_from_log(batch: LogBatch, catalogue: list[Signature], nodes: list[str], now: dt.datetime
                   ) -> tuple[AnomalyDetected, bool] | None:
    """The batch's root cause as an anomaly, and whether it is only a cascade symptom."""
    cause = root_cause(scan(batch.lines, catalogue))
    if cause is None:
        return None
    return _from_match(batch, cause, nodes, now), cause.signature.cascade


def _from_match(batch: LogBatch, cause: Match, nodes: list[str], now: dt.datetime) -> AnomalyDetected:
    sig = cause.signature
    offset = batch.offset + sum(len(line.encode()) + 1 for line in batch.lines[: cause.index])
    return AnomalyDetected(
        anomaly_id=anomaly_id(batch.cluster, batch.job_id, batch.attempt), cluster=batch.cluster,
        job_id=batch.job_id, attempt=batch.attempt, kind="crash", source="log", signature_id=sig.id,
        category=sig.category, fault_domain=sig.fault_domain, action=sig.action, summary=sig.summary,
        nodes=nodes, evidence=[EvidenceLine(path=batch.path, offset=offset, text=cause.text[:2000])],
        detected_at=now,
    )


def crash_from_scheduler(observed: JobObserved, now: dt.datetime) -> AnomalyDetected | None:
    """Fallback when the scheduler reports a failure and no log line explained it."""
    fallback = _SCHEDULER_FALLBACK.get(observed.state)
    if fallback is None:
        return None
    category, domain, action, summary = fallback
    exit_note = f" (exit code {observed.exit_code})" if observed.exit_code is not None else ""
    return AnomalyDetected(
        anomaly_id=anomaly_id(observed.cluster, observed.job_id, observed.restarts), cluster=observed.cluster,
        job_id=observed.job_id, attempt=observed.restarts, kind="crash", source="scheduler",
        signature_id=f"scheduler_{observed.state.lower()}", category=category, fault_domain=domain,
        action=action, summary=f"{summary}: Slurm reports {observed.state} reason={observed.reason}{exit_note}",
        nodes=observed.nodes, evidence=[], detected_at=now,
    )
