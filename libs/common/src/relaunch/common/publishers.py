"""What more than one part of relaunch publishes, declared once for the AsyncAPI document: dead
letters and audit entries (every service), progress reports (training code through relaunch.client).
Each service's own publications are declared on its router."""

from __future__ import annotations

from faststream.nats import JStream, NatsRouter

from . import subjects
from .schemas import AuditEntry, DeadLetter, ProgressReported


def router() -> NatsRouter:
    r = NatsRouter()
    r.publisher(subjects.signal_progress("{cluster}", "{job_id}"), stream=JStream(subjects.SIGNALS.name, declare=False),
                schema=ProgressReported, title="progress report",
                description="Training code through relaunch.client.report_progress, or a log parser.")
    r.publisher(subjects.event_audit("{cluster}", "{job_id}"), stream=JStream(subjects.EVENTS.name, declare=False),
                schema=AuditEntry, title="audit entry",
                description="Every service's audit trail, and the API's operator overrides.")
    r.publisher(subjects.dlq("{service}"), stream=JStream(subjects.DLQ.name, declare=False), schema=DeadLetter,
                title="dead letter", description="Every service, for a message it could not accept (with the reason).")
    return r
