"""Every durable consumer of relaunch, declared once (docs/architecture.md, "Errors"; docs/events.md,
"Durable consumers"): which service reads it, the message model, how it is ordered and which engine
pulls it; the one core NATS request/reply, the gpu-probe's fault injection (`Responder`); and the
API's live readers of EVENTS (`Reader`). From these declarations come
- the wiring: `subscriber()` makes a service router's FastStream subscriber (`NatsRouter`,
  `JStream(declare=False)`, `PullSub`), and `relaunch.common.ingest` pulls the high-volume ingest;
- the NATS permissions (`natsauth.CONSUMERS`);
- the AsyncAPI document (FastStream's generator over the routers, plus `x-relaunch-consumer`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from faststream import AckPolicy
from faststream.nats import JStream, NatsRouter, PullSub
from nats.js.api import AckPolicy as JsAckPolicy, ConsumerConfig, DeliverPolicy

from . import subjects
from .bodies import parse_body
from .schemas import (AnomalyDetected, AuditEntry, CheckpointFact, DeadLetter, FaultInjection, HangEvidence, InjectionAck, JobObserved,
                      LogBatch, Message, NodeHealth, ProgressReported, ReconcileStatus, Advice)


@dataclass(frozen=True)
class Consumer:
    service: str
    spec: subjects.ConsumerSpec
    model: type[Message]
    description: str = ""
    per_subject: bool = False
    """True: one subject's (one job's) messages in stream order, different subjects' at once (for
    handlers safe to run for different jobs together); False: every message in order."""
    batch: int = 16
    """Messages asked for per pull request."""
    fetch_timeout_s: float = 0.5
    """How long one pull waits (FastStream consumers). nats-py's fetch returns only when `batch` messages
    came or this passed, and FastStream fetches again only once the messages it returned are handled, so
    a message naked for a short delay waits up to this long on top of it."""
    max_ack_pending: int | None = None
    """Messages delivered and not yet acknowledged that the server allows (None: its default, 1,000)."""
    engine: Literal["faststream", "ingest"] = "faststream"
    """"ingest": the high-volume progress and log path, pulled by relaunch.common.ingest (measured 4x
    cheaper per message than FastStream's batch subscriber)."""

    def consumer_config(self) -> ConsumerConfig:
        spec = self.spec
        return ConsumerConfig(
            durable_name=spec.durable, ack_policy=JsAckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=spec.ack_wait_s, max_deliver=spec.max_deliver, filter_subject=spec.filter_subject,
            max_ack_pending=self.max_ack_pending,
        )

    def facts(self) -> dict[str, Any]:
        """relaunch's facts about the consumer for the AsyncAPI document (x-relaunch-consumer)."""
        s = self.spec
        return {"durable": s.durable, "stream": s.stream.name, "filter_subject": s.filter_subject,
                "ack_wait_s": s.ack_wait_s, "max_deliver": s.max_deliver}


DETECTOR_LOGS = Consumer("detector", subjects.DETECTOR_LOGS, LogBatch,
                         "Log batches of running jobs: crash signatures and progress lines.",
                         per_subject=True, batch=64, engine="ingest")
DETECTOR_PROGRESS = Consumer("detector", subjects.DETECTOR_PROGRESS, ProgressReported,
                             "Progress reports (relaunch.client or a log parser): hangs and stragglers.",
                             batch=512, engine="ingest",
                             # Three batches in the tracker and one asked for (detector/main.py): with the
                             # server's default of 1,000 the third was never delivered.
                             max_ack_pending=4 * 512)
DETECTOR_JOBS = Consumer("detector", subjects.DETECTOR_JOBS, JobObserved,
                         "The scheduler's view of each job: what to follow, failures Slurm reports.",
                         per_subject=True, batch=64)
DETECTOR_NODES = Consumer("detector", subjects.DETECTOR_NODES, NodeHealth,
                          "gpu-probe heartbeats: a node whose probe falls silent while its job stops is lost.",
                          batch=64)
# Jobs decided concurrently (a decision mostly waits on Postgres, and 1,000 failures at once must all
# be decided within seconds); safe, as between replicas: each holds its job's row lock.
DECIDER_JOBS = Consumer("decider", subjects.DECIDER_JOBS, JobObserved, "Job observations, into the ledger.",
                        per_subject=True, batch=64)
DECIDER_ANOMALIES = Consumer("decider", subjects.DECIDER_ANOMALIES, AnomalyDetected,
                             "Anomalies: decided under the job's policy into Advice.", per_subject=True, batch=64,
                             fetch_timeout_s=0.1)  # an anomaly naked to wait for its attempt's nodes: back in 0.5 s
DECIDER_RECONCILE = Consumer("decider", subjects.DECIDER_RECONCILE, ReconcileStatus,
                             "The actuator's reconcile statuses, into the ledger.")
DECIDER_AUDIT = Consumer("decider", subjects.DECIDER_AUDIT, AuditEntry, "Audit entries of every service, into the ledger.")
DECIDER_NODES = Consumer("decider", subjects.DECIDER_NODES, NodeHealth, "gpu-probe readings: evidence for attribution.")
DECIDER_HANG_EVIDENCE = Consumer("decider", subjects.DECIDER_HANG_EVIDENCE, HangEvidence,
                                 "Hang evidence (the ranks read from outside the job): into the ledger, for the "
                                 "hang's decision.", per_subject=True)
DECIDER_CHECKPOINTS = Consumer("decider", subjects.DECIDER_CHECKPOINTS, CheckpointFact,
                               "Checkpoint facts (saves, an attempt's first step and last progress): into the "
                               "ledger, for lost time and the no-checkpoint rule.", per_subject=True, batch=64)
# Different jobs' Advice reconciled at once, one job's in order: jobs that fail together no longer
# wait for each other's requeue, release and StartTime=now; and short pulls, so that an Advice naked to
# look again in 0.1-0.3 s (a successor still COMPLETING, the credential second) is back that soon, not
# half a second later (docs/architecture.md, "Reconcile").
ACTUATOR_ADVICE = Consumer("actuator", subjects.ACTUATOR_ADVICE, Advice,
                           "Advice: reconciled against Slurm, acked only at a terminal outcome.", per_subject=True,
                           fetch_timeout_s=0.1)
# Different jobs' hangs read at once; every other anomaly is acked at once.
ACTUATOR_HANGS = Consumer("actuator", subjects.ACTUATOR_HANGS, AnomalyDetected,
                          "Hang anomalies: the hung job's ranks read from inside its allocation (py-spy, /proc), "
                          "published as HangEvidence.", per_subject=True)

# The notifier pulls a batch at a time (relaunch.common.ingest): a storm arrives together and is
# posted as one digest per route.
NOTIFIER_AUDIT = Consumer("notifier", subjects.NOTIFIER_AUDIT, AuditEntry,
                          "Audit entries: a job stopped, a restart without nodes, posted to webhooks.",
                          batch=64, engine="ingest")
NOTIFIER_RECONCILE = Consumer("notifier", subjects.NOTIFIER_RECONCILE, ReconcileStatus,
                              "Reconcile statuses: an abandoned Advice, posted to webhooks.", batch=64, engine="ingest")
NOTIFIER_DLQ = Consumer("notifier", subjects.NOTIFIER_DLQ, DeadLetter,
                        "Dead letters: relaunch itself is unhealthy, posted to webhooks.", batch=64, engine="ingest")

ALL: tuple[Consumer, ...] = (DETECTOR_LOGS, DETECTOR_JOBS, DETECTOR_PROGRESS, DETECTOR_NODES, DECIDER_JOBS,
                             DECIDER_ANOMALIES, DECIDER_RECONCILE, DECIDER_AUDIT, DECIDER_NODES, DECIDER_HANG_EVIDENCE,
                             DECIDER_CHECKPOINTS,
                             ACTUATOR_ADVICE, ACTUATOR_HANGS,
                             NOTIFIER_AUDIT, NOTIFIER_RECONCILE, NOTIFIER_DLQ)


def of(service: str) -> tuple[Consumer, ...]:
    return tuple(c for c in ALL if c.service == service)


def decoder(model: type[Message]) -> Callable:
    """A FastStream decoder that validates the body as `model` from its JSON at once (pydantic's
    JSON path), raising PermanentError with the reason when it is not one: the outcome middleware
    dead-letters it."""

    async def decode(message: Any) -> Message:
        return parse_body(model, message.body)

    return decode


def subscriber(router: NatsRouter, consumer: Consumer, inbox_prefix: str = "_INBOX",
               document_only: bool = False) -> Callable:
    """The FastStream subscriber of `consumer` on `router` (use it as a decorator of the handler,
    which takes the body and, if it wants them, the message's Delivery through `delivery()`).
    `document_only`: for a router that only feeds the AsyncAPI document, where the ingest engine's
    consumers are declared too."""
    assert document_only or consumer.engine == "faststream", \
        f"{consumer.spec.durable} is pulled by relaunch.common.ingest"
    spec = consumer.spec
    return router.subscriber(
        spec.filter_subject, stream=JStream(spec.stream.name, declare=False), durable=spec.durable,
        config=consumer.consumer_config(), pull_sub=PullSub(batch_size=consumer.batch, timeout=consumer.fetch_timeout_s),
        # nats-py's pull subscriptions take their reply inbox from here, not from the connection: the
        # default (_INBOX.) is refused to relaunch's per-service NATS users (natsauth).
        inbox_prefix=f"{inbox_prefix}.".encode(),
        ack_policy=AckPolicy.MANUAL,  # settled by the outcome middleware, never term()ed on a bug
        decoder=decoder(consumer.model), no_reply=True,
        title=f"{spec.durable}:{consumer.model.__name__}", description=consumer.description,
    )


@dataclass(frozen=True)
class Responder:
    """A core NATS request/reply subscriber: nothing durable, nothing acked; the handler's return value
    is the reply, published to the requester's own inbox (`_INBOX_<user>.`, natsauth) on the reply
    subject the request names, which `allow_responses` lets the responder publish to once."""

    service: str
    name: str
    """The responder's name (its AsyncAPI channel and operation are `<name>:<request model>`)."""
    subject: str
    """The subject with its parameters in braces (`{cluster}`, `{node}`): `subject_for` fills them in.
    Each process answers its own concrete subject only (its NATS user may subscribe to nothing else)."""
    request: type[Message]
    reply: type[Message]
    description: str = ""

    def subject_for(self, **params: str) -> str:
        return self.subject.format(**params)

    def facts(self) -> dict[str, Any]:
        """relaunch's facts about the responder for the AsyncAPI document (x-relaunch-responder)."""
        return {"core_nats": True, "request": self.request.__name__, "reply": self.reply.__name__}


PROBE_INJECT = Responder("gpu-probe", "probe-inject", subjects.control_inject("{cluster}", "{node}"),
                         FaultInjection, InjectionAck,
                         "Fault injection into one node's fake GPUs (`relaunch inject`), answered at once with "
                         "an InjectionAck; an invalid request is answered too, refused with the reason.")

RESPONDERS: tuple[Responder, ...] = (PROBE_INJECT,)


async def raw_body(message: Any) -> bytes:
    """A FastStream decoder that leaves the body as it came: a responder answers an invalid request
    with the reason, so the body is validated by its handler, not before it."""
    return message.body


def responder(router: NatsRouter, declared: Responder, **params: str) -> Callable:
    """The FastStream core subscriber of `declared` on `router`, on the subject `params` make (or on the
    templated subject, for the AsyncAPI document); the handler takes the raw body and returns the
    reply's bytes."""
    subject = declared.subject_for(**params) if params else declared.subject
    return router.subscriber(subject, decoder=raw_body,
                             title=f"{declared.name}:{declared.request.__name__}",
                             description=declared.description)


@dataclass(frozen=True)
class Reader:
    """Live reading of a stream: one JetStream ordered consumer per reader (ephemeral, in memory, no
    acks, named by the server and gone when the reader goes; nats-py recreates it from the last
    sequence seen when a message goes missing). Its messages are handed over as they come, raw."""

    service: str
    name: str
    stream: subjects.StreamSpec
    filter_subject: str
    """The widest filter a reader may ask for (each reader narrows it)."""
    description: str = ""

    def facts(self) -> dict[str, Any]:
        """relaunch's facts about the reader for the AsyncAPI document (x-relaunch-reader)."""
        return {"stream": self.stream.name, "ordered_consumer": True, "durable": None}


API_EVENTS = Reader("api", "api-events", subjects.EVENTS, subjects.ALL_EVENTS,
                    "GET /v1/events/stream: each browser tab reads EVENTS live from a time or sequence.")

READERS: tuple[Reader, ...] = (API_EVENTS,)


def reader(registrar: Any, declared: Reader, subject: str | None = None, config: ConsumerConfig | None = None,
           *, pending_msgs: int = 4096, persistent: bool = True) -> Any:
    """The FastStream subscriber of one live reader of `declared` on `registrar` (a router, or a
    running broker with persistent=False: one subscriber per reader, dropped when it goes). The
    handler takes the raw body and the message (its stream sequence and time are in the metadata)."""
    return registrar.subscriber(
        subject or declared.filter_subject, stream=JStream(declared.stream.name, declare=False),
        ordered_consumer=True, config=config, idle_heartbeat=5.0, pending_msgs_limit=pending_msgs,
        # Nothing to ack on an ordered consumer, and the reader's user may not publish to $JS.ACK.
        ack_policy=AckPolicy.MANUAL, decoder=raw_body, no_reply=True, persistent=persistent,
        title=f"{declared.name}:{declared.stream.name}", description=declared.description,
    )
