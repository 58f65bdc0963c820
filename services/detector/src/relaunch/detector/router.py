"""The detector's FastStream router: job observations (declared in relaunch.common.consumers), and
the anomalies and log batches it publishes. Log batches and progress reports are consumed by the
ingest engine (relaunch.common.ingest), not here: they are the high-volume path."""

from __future__ import annotations

from faststream.nats import JStream, NatsRouter

from relaunch.common import consumers, subjects
from relaunch.common.schemas import AnomalyDetected, CheckpointFact, LogBatch
from relaunch.common.serving import route

from .handlers import Detector
from .node_watch import LostNodeWatch


def router(detector: Detector | None = None, inbox_prefix: str = "_INBOX",
           nodes: LostNodeWatch | None = None) -> NatsRouter:
    """The detector's router; without a detector, the declaration alone (for the AsyncAPI document),
    the ingest engine's two consumers included."""
    r = NatsRouter()
    route(r, consumers.DETECTOR_JOBS, detector.on_job if detector else None, inbox_prefix)
    route(r, consumers.DETECTOR_NODES, nodes.on_node if nodes else None, inbox_prefix)
    if detector is None:
        route(r, consumers.DETECTOR_LOGS)
        route(r, consumers.DETECTOR_PROGRESS)
    r.publisher(subjects.event_anomaly("{cluster}", "{job_id}"), stream=JStream(subjects.EVENTS.name, declare=False),
                schema=AnomalyDetected, title="anomaly", description="A crash, hang, divergence or straggler.")
    r.publisher(subjects.signal_log("{cluster}", "{job_id}"), stream=JStream(subjects.SIGNALS.name, declare=False),
                schema=LogBatch, title="log batch", description="New lines of a job's log, from the follower.")
    r.publisher(subjects.event_checkpoint("{cluster}", "{job_id}"), stream=JStream(subjects.EVENTS.name, declare=False),
                schema=CheckpointFact, title="checkpoint fact",
                description="A checkpoint save, an attempt's first step, its last progress or its catching up "
                            "(docs/goodput.md).")
    return r
