"""Pure detection: log batches and scheduler observations -> AnomalyDetected (time passed in).

One anomaly per job attempt: its id is `<cluster>.<job>.<attempt>.crash`, so a replay or a second
detector publishing the same finding is deduplicated by JetStream and by the decider.
The root cause comes from relaunch.common.diagnosis.classifying, the same code `relaunch classify` runs offline, so
the service and the command line always agree on what a log means.
"""

from __future__ import annotations

import datetime as dt
import json

from relaunch.common.diagnosis.classifying import Classification, classify
from relaunch.common.diagnosis.peers import nodes_named
from relaunch.common.diagnosis.scanning import Scanner, scanner_for
from relaunch.common.diagnosis.signatures import Catalogue
from relaunch.common.job_states import as_read
from relaunch.common.schemas import AnomalyDetected, EvidenceLine, JobObserved, LogBatch


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




def scheduler_state(observed: JobObserved) -> str:
    """Slurm's state as relaunch reads it. A preempted job ends PREEMPTED (src/slurmctld/job_mgr.c sets it
    for PreemptMode=CANCEL and for a job that ends within its preemption GraceTime), but a CANCELLED one
    whose reason names a preemption (a site's reclaim tool that cancels, an older or federated path) was
    preempted too: never a user's cancel, which relaunch does not restart, but the scheduler's doing,
    which it does (the policy's restart_on_preemption, docs/policy.md)."""
    return as_read(observed.state, observed.reason)


def anomaly_id(cluster: str, job_id: str, attempt: int, kind: str = "crash") -> str:
    """One anomaly per attempt and kind, whatever replica finds it."""
    return f"{cluster}.{job_id}.{attempt}.{kind}"


def crash_from_log(batch: LogBatch, catalogue: Catalogue | Scanner, nodes: list[str], now: dt.datetime,
                   node_addrs: dict[str, str] | None = None, nodes_down: list[str] | None = None
                   ) -> tuple[AnomalyDetected, bool] | None:
    """The batch's root cause as an anomaly, and whether it is only a cascade symptom.

    `nodes` are the job's nodes: the anomaly names the culprits among them when the log points at
    some (so that restart_excluding excludes only those), else all of them, as before. `node_addrs`:
    node -> NodeAddr (JobObserved.node_addrs), which turns an address the log blames into its node."""
    found = classify_batch(batch, catalogue)
    if found is None:
        return None
    return crash_anomaly(batch, found, nodes, now, node_addrs, nodes_down), found.cascade


def classify_batch(batch: LogBatch, catalogue: Catalogue | Scanner) -> Classification | None:
    """The batch's root cause, if its lines show a failure (crash_from_log's first half: it needs no job
    nodes, so a caller reads them only for the few batches that show one)."""
    scanner = catalogue if isinstance(catalogue, Scanner) else scanner_for(catalogue)
    return classify(scanner.scan(batch.lines))


def crash_anomaly(batch: LogBatch, found: Classification, nodes: list[str], now: dt.datetime,
                  node_addrs: dict[str, str] | None = None, nodes_down: list[str] | None = None) -> AnomalyDetected:
    """crash_from_log's second half: `found` (classify_batch's) as an anomaly against the job's `nodes`.
    The hosts and addresses the lines blame (the far end a line names, else the host that printed it:
    relaunch.common.diagnosis.peers) become Slurm node names with `node_addrs`; an address no single node
    of the mapping has names none (the evidence still shows it).

    A node failure whose lines blame no node (Slurm's "*** STEP ... ON node3 CANCELLED AT ... DUE TO NODE
    FAILURE" is printed by a survivor) names the job's nodes Slurm shows down (`nodes_down`,
    JobObserved.nodes_down) when they are some of its nodes, and says so in the summary."""
    culprits = tuple(nodes_named(found.nodes, found.addresses, node_addrs or {}))
    anomaly = _anomaly(batch, found, _implicated(culprits, nodes), now)
    down = down_among(nodes_down, nodes)
    if found.category == NODE_FAILURE and not culprits and down:
        anomaly = anomaly.model_copy(update={"nodes": down, "summary": f"{found.summary}; {_down_said(down)}"})
    return anomaly


NODE_FAILURE = "slurm_node_failure"


def down_among(nodes_down: list[str] | None, nodes: list[str]) -> list[str]:
    """The job's nodes Slurm shows down, when they are some of them (all of them down says nothing of
    which one failed: none is named, as a cut of every host is judged in lost_nodes.py)."""
    down = [n for n in nodes if n in set(nodes_down or ())]
    return down if down and len(down) < len(nodes) else []


def _down_said(down: list[str]) -> str:
    return f"Slurm shows {', '.join(down)} down (DOWN, FAIL or NOT_RESPONDING): the failed node"


def held_field(anomaly: AnomalyDetected, found: Classification, evidence_at: dt.datetime) -> str:
    """A crash whose lines blame addresses, kept in the job's hash ("unmapped") until the observation that
    names the job's nodes and their NodeAddr comes: what mapped_held needs to name its culprits then."""
    return json.dumps({"anomaly": anomaly.model_dump(mode="json", by_alias=True), "names": list(found.nodes),
                       "addresses": list(found.addresses), "at": evidence_at.isoformat()})


def mapped_held(held: str, observed: JobObserved) -> tuple[AnomalyDetected | None, dt.datetime]:
    """The held crash with its culprits among the observed nodes (mapped with the observation's NodeAddr
    when it is of the crash's attempt; else as they were), and when its evidence was complete. None (and
    the time) when the field cannot be read."""
    try:
        data = json.loads(held)
        anomaly = AnomalyDetected.model_validate(data["anomaly"])
        at = dt.datetime.fromisoformat(data["at"])
    except (ValueError, KeyError, TypeError):
        return None, observed.observed_at
    if anomaly.attempt != observed.restarts or not observed.nodes:
        return anomaly, at
    culprits = tuple(nodes_named(data.get("names") or [], data.get("addresses") or [], observed.node_addrs))
    return anomaly.model_copy(update={"nodes": _implicated(culprits, list(observed.nodes))}), at


def node_addrs_field(node_addrs: dict[str, str]) -> str:
    """JobObserved.node_addrs as the job's hash keeps it (field "addrs")."""
    return json.dumps(node_addrs, sort_keys=True)


def parse_node_addrs(value: str | None) -> dict[str, str]:
    """The hash's "addrs" field back (empty when absent or unreadable)."""
    try:
        found = json.loads(value or "{}")
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def _implicated(culprits: tuple[str, ...], job_nodes: list[str]) -> list[str]:
    """Culprits the job ran on. A name outside the job (a container's host name, a peer) is dropped,
    because excluding a node Slurm does not know makes sbatch fail; so with no job nodes to check
    against, no name is given (the evidence still shows them)."""
    return [n for n in culprits if n in job_nodes] or list(job_nodes)


def _anomaly(batch: LogBatch, found: Classification, nodes: list[str], now: dt.datetime) -> AnomalyDetected:
    offsets, position = {}, batch.offset
    wanted = {e.index for e in found.evidence}
    for index, line in enumerate(batch.lines[: max(wanted) + 1]):
        if index in wanted:
            offsets[index] = position
        position += len(line.encode()) + 1
    return AnomalyDetected(
        anomaly_id=anomaly_id(batch.cluster, batch.job_id, batch.attempt), cluster=batch.cluster,
        job_id=batch.job_id, attempt=batch.attempt, kind="crash", source="log", signature_id=found.signature_id,
        category=found.category, fault_domain=found.fault_domain, action=found.action, summary=found.summary,
        nodes=nodes, ranks=list(found.ranks),
        evidence=[EvidenceLine(path=batch.path, offset=offsets[e.index], text=e.text[:2000]) for e in found.evidence],
        detected_at=now,
    )


LOG_UNREAD = "log_unread"
"""The category of a failure whose log relaunch could not read: never restarted (docs/policy.md)."""


def crash_from_scheduler(observed: JobObserved, now: dt.datetime, log_problem: str | None = None
                         ) -> AnomalyDetected | None:
    """Fallback when the scheduler reports a failure and no log line explained it.

    `log_problem` says why the job's log could not be read, when it could not. A plain FAILED is then
    not restarted: without the log, an error in the job itself (which would fail the same way again)
    cannot be ruled out. The scheduler's own verdicts (NODE_FAIL, TIMEOUT, ...) keep their action. A
    preemption (PREEMPTED, or CANCELLED with a preemption reason: scheduler_state) is the scheduler's.
    """
    state = scheduler_state(observed)
    fallback = _SCHEDULER_FALLBACK.get(state)
    if fallback is None:
        return None
    category, domain, action, summary = fallback
    signature = f"scheduler_{state.lower()}"
    exit_note = f" (exit code {observed.exit_code})" if observed.exit_code is not None else ""
    summary = f"{summary}: Slurm reports {observed.state} reason={observed.reason or 'None'}{exit_note}"
    if log_problem:
        if observed.state == "FAILED":
            category, action, signature = LOG_UNREAD, "stop", "scheduler_failed_log_unread"
            summary = (f"the job failed and relaunch could not read its log ({log_problem}), so an error in the "
                       f"job itself cannot be ruled out: Slurm reports {observed.state} "
                       f"reason={observed.reason or 'None'}{exit_note}")
        else:
            summary += f"; its log could not be read ({log_problem})"
    nodes = observed.nodes
    if category == NODE_FAILURE and (down := down_among(observed.nodes_down, observed.nodes)):
        nodes, summary = down, f"{summary}; {_down_said(down)}"
    return AnomalyDetected(
        anomaly_id=anomaly_id(observed.cluster, observed.job_id, observed.restarts), cluster=observed.cluster,
        job_id=observed.job_id, attempt=observed.restarts, kind="crash", source="scheduler",
        signature_id=signature, category=category, fault_domain=domain,
        action=action, summary=summary, nodes=nodes, evidence=[], exit_code=observed.exit_code,
        detected_at=now,
    )
