"""The decider's FastStream router: its five consumers (declared in relaunch.common.consumers) and
the Advice it publishes (through the transactional outbox, relaunch.decider.outbox)."""

from __future__ import annotations

from faststream.nats import JStream, NatsRouter

from relaunch.common import consumers, subjects
from relaunch.common.schemas import Advice
from relaunch.common.serving import route

from .handlers import Decider


def router(decider: Decider, inbox_prefix: str = "_INBOX") -> NatsRouter:
    r = NatsRouter()
    route(r, consumers.DECIDER_JOBS, decider.on_job, inbox_prefix)
    route(r, consumers.DECIDER_ANOMALIES, decider.on_anomaly, inbox_prefix)
    route(r, consumers.DECIDER_RECONCILE, decider.on_reconcile, inbox_prefix)
    route(r, consumers.DECIDER_AUDIT, decider.on_audit, inbox_prefix)
    route(r, consumers.DECIDER_NODES, decider.on_node, inbox_prefix)
    r.publisher(subjects.advice("{cluster}", "{job_id}"), stream=JStream(subjects.ADVICE.name, declare=False),
                schema=Advice, title="advice", description="Advice, published by the outbox with its Msg-Id.")
    return r
