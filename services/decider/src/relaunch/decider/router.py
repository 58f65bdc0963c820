"""The decider's FastStream router: its seven consumers (declared in relaunch.common.consumers) and
the Advice it publishes (through the transactional outbox, relaunch.decider.outbox)."""

from __future__ import annotations

from faststream.nats import JStream, NatsRouter

from relaunch.common import consumers, subjects
from relaunch.common.schemas import Advice
from relaunch.common.serving import route

from .handlers import Decider


def router(decider: Decider | None = None, inbox_prefix: str = "_INBOX") -> NatsRouter:
    """The decider's router; without a decider, the declaration alone (for the AsyncAPI document)."""
    r = NatsRouter()
    d = decider
    route(r, consumers.DECIDER_JOBS, d and d.on_job, inbox_prefix)
    route(r, consumers.DECIDER_ANOMALIES, d and d.on_anomaly, inbox_prefix)
    route(r, consumers.DECIDER_RECONCILE, d and d.on_reconcile, inbox_prefix)
    route(r, consumers.DECIDER_AUDIT, d and d.on_audit, inbox_prefix)
    route(r, consumers.DECIDER_NODES, d and d.on_node, inbox_prefix)
    route(r, consumers.DECIDER_HANG_EVIDENCE, d and d.on_hang_evidence, inbox_prefix)
    route(r, consumers.DECIDER_CHECKPOINTS, d and d.on_checkpoint, inbox_prefix)
    r.publisher(subjects.advice("{cluster}", "{job_id}"), stream=JStream(subjects.ADVICE.name, declare=False),
                schema=Advice, title="advice", description="Advice, published by the outbox with its Msg-Id.")
    return r
