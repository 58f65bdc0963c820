"""Every subject, stream and durable consumer name (contract: docs/events.md, "Subjects" and "Streams").

Handlers never spell a subject themselves; they call these functions.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "relaunch"


def signal_log(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.signal.log.{cluster}.{job_id}"


def signal_progress(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.signal.progress.{cluster}.{job_id}"


def signal_job(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.signal.job.{cluster}.{job_id}"


def signal_node(cluster: str, node: str) -> str:
    return f"{PREFIX}.signal.node.{cluster}.{node}"


def event_anomaly(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.event.anomaly.{cluster}.{job_id}"


def advice(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.advice.{cluster}.{job_id}"


def event_reconcile(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.event.reconcile.{cluster}.{job_id}"


def event_hang_evidence(cluster: str, job_id: str) -> str:
    """HangEvidence: what the actuator read of a hung job's ranks (docs/architecture.md, "Hang evidence")."""
    return f"{PREFIX}.event.hang_evidence.{cluster}.{job_id}"


def event_checkpoint(cluster: str, job_id: str) -> str:
    """CheckpointFact: a save, an attempt's first step, its last progress (docs/goodput.md)."""
    return f"{PREFIX}.event.checkpoint.{cluster}.{job_id}"


def event_audit(cluster: str, job_id: str) -> str:
    return f"{PREFIX}.event.audit.{cluster}.{job_id}"


def dlq(service: str) -> str:
    return f"{PREFIX}.dlq.{service}"


def control_inject(cluster: str, node: str) -> str:
    """Plain NATS request/reply to one node's gpu-probe (FaultInjection -> InjectionAck).

    Control subjects lie outside every stream on purpose: a stream capturing them would answer the
    request itself with a PubAck, and the CLI could no longer tell whether a probe heard it.
    """
    return f"{PREFIX}.control.inject.{cluster}.{node}"


# Filters (wildcards) used by consumers.
ALL_SIGNAL_LOG = f"{PREFIX}.signal.log.>"
ALL_SIGNAL_JOB = f"{PREFIX}.signal.job.>"
ALL_SIGNAL_PROGRESS = f"{PREFIX}.signal.progress.>"
ALL_SIGNAL_NODE = f"{PREFIX}.signal.node.>"
ALL_ANOMALIES = f"{PREFIX}.event.anomaly.>"
ALL_ADVICE = f"{PREFIX}.advice.>"
ALL_RECONCILE = f"{PREFIX}.event.reconcile.>"
ALL_AUDIT = f"{PREFIX}.event.audit.>"
ALL_HANG_EVIDENCE = f"{PREFIX}.event.hang_evidence.>"
ALL_CHECKPOINTS = f"{PREFIX}.event.checkpoint.>"
ALL_EVENTS = f"{PREFIX}.event.>"
ALL_DLQ = f"{PREFIX}.dlq.>"
ALL_CONTROL_INJECT = f"{PREFIX}.control.inject.>"


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    max_age_s: float
    duplicate_window_s: float
    max_msgs_per_subject: int = -1


SIGNALS = StreamSpec("SIGNALS", (f"{PREFIX}.signal.>",), max_age_s=6 * 3600, duplicate_window_s=300)
EVENTS = StreamSpec("EVENTS", (f"{PREFIX}.event.>",), max_age_s=30 * 86400, duplicate_window_s=900)
# ADVICE keeps a history per job subject; the dedupe window covers an outbox replay after a long outage.
ADVICE = StreamSpec("ADVICE", (f"{PREFIX}.advice.>",), max_age_s=30 * 86400, duplicate_window_s=3600,
                    max_msgs_per_subject=64)
DLQ = StreamSpec("DLQ", (f"{PREFIX}.dlq.>",), max_age_s=30 * 86400, duplicate_window_s=120)
STREAMS: tuple[StreamSpec, ...] = (SIGNALS, EVENTS, ADVICE, DLQ)


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer. ack_wait and max_deliver are chosen per consumer, on purpose."""

    durable: str
    stream: StreamSpec
    filter_subject: str
    ack_wait_s: float
    max_deliver: int


# The detector reads log batches and job observations.
DETECTOR_LOGS = ConsumerSpec("detector-logs", SIGNALS, ALL_SIGNAL_LOG, ack_wait_s=30, max_deliver=10)
DETECTOR_JOBS = ConsumerSpec("detector-jobs", SIGNALS, ALL_SIGNAL_JOB, ack_wait_s=30, max_deliver=60)
DETECTOR_PROGRESS = ConsumerSpec("detector-progress", SIGNALS, ALL_SIGNAL_PROGRESS, ack_wait_s=30, max_deliver=10)
# gpu-probe heartbeats: their silence finds a lost host (a missed one costs nothing: the next one counts).
DETECTOR_NODES = ConsumerSpec("detector-nodes", SIGNALS, ALL_SIGNAL_NODE, ack_wait_s=30, max_deliver=5)
# The decider owns the ledger: it records jobs, anomalies, reconcile statuses and audit entries.
DECIDER_JOBS = ConsumerSpec("decider-jobs", SIGNALS, ALL_SIGNAL_JOB, ack_wait_s=30, max_deliver=100)
DECIDER_ANOMALIES = ConsumerSpec("decider-anomalies", EVENTS, ALL_ANOMALIES, ack_wait_s=30, max_deliver=100)
DECIDER_RECONCILE = ConsumerSpec("decider-reconcile", EVENTS, ALL_RECONCILE, ack_wait_s=30, max_deliver=100)
DECIDER_AUDIT = ConsumerSpec("decider-audit", EVENTS, ALL_AUDIT, ack_wait_s=30, max_deliver=100)
# Node health: evidence for attribution (heartbeats every interval; a few lost ones cost nothing).
DECIDER_NODES = ConsumerSpec("decider-nodes", SIGNALS, ALL_SIGNAL_NODE, ack_wait_s=30, max_deliver=10)
# Hang evidence, into the ledger with its anomaly (the hang's decision waits for it, a bounded time).
DECIDER_HANG_EVIDENCE = ConsumerSpec("decider-hang-evidence", EVENTS, ALL_HANG_EVIDENCE, ack_wait_s=30,
                                     max_deliver=100)
# Checkpoint facts, into the ledger (what a failure cost, and the no-checkpoint rule: docs/goodput.md).
DECIDER_CHECKPOINTS = ConsumerSpec("decider-checkpoints", EVENTS, ALL_CHECKPOINTS, ack_wait_s=30, max_deliver=100)
# The actuator acks an Advice only at a terminal outcome and naks to look again meanwhile, so
# redeliveries are unbounded by design; expiry (Advice.expires_at) ends a stuck one instead.
# ack_wait is short so that the Advice a killed actuator was handling comes back quickly to the
# restarted one or to the standby; one pass (one Slurm command, timeout 8 s) fits well inside it.
ACTUATOR_ADVICE = ConsumerSpec("actuator-advice", ADVICE, ALL_ADVICE, ack_wait_s=10, max_deliver=-1)
# Hang anomalies: the actuator steps into the job's allocation and reads its ranks (bounded at about 20 s,
# docs/architecture.md, "Hang evidence"); ack_wait covers one collection; a collection is not worth
# repeating much (the decider decides without evidence after its own bounded wait).
ACTUATOR_HANGS = ConsumerSpec("actuator-hangs", EVENTS, ALL_ANOMALIES, ack_wait_s=60, max_deliver=3)

# The notifier posts chosen events to webhooks (docs/notifications.md). It acks a message only once
# every route that wants it has taken it (or refused it for good), and naks with a back-off while a
# receiver is down, so redeliveries are unbounded by design (like the actuator's); ack_wait covers a
# batch's posts (each bounded by its route's timeout, at most 30 s).
NOTIFIER_AUDIT = ConsumerSpec("notifier-audit", EVENTS, ALL_AUDIT, ack_wait_s=120, max_deliver=-1)
NOTIFIER_RECONCILE = ConsumerSpec("notifier-reconcile", EVENTS, ALL_RECONCILE, ack_wait_s=120, max_deliver=-1)
NOTIFIER_DLQ = ConsumerSpec("notifier-dlq", DLQ, ALL_DLQ, ack_wait_s=120, max_deliver=-1)

MSG_ID_HEADER = "Nats-Msg-Id"
