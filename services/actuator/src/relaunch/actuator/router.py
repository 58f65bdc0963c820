"""The actuator's FastStream router: the Advice it reconciles (declared in relaunch.common.consumers)
and what it publishes (job observations from the scheduler observer, reconcile statuses, audit
entries). At run time main serves the Advice consumer with `serving.consume`, which starts it only
while this actuator holds the lease; this router is its declaration for the AsyncAPI document."""

from __future__ import annotations

from faststream.nats import JStream, NatsRouter

from relaunch.common import consumers, subjects
from relaunch.common.schemas import HangEvidence, JobObserved, ReconcileStatus
from relaunch.common.serving import route


def router() -> NatsRouter:
    r = NatsRouter()
    route(r, consumers.ACTUATOR_ADVICE)
    route(r, consumers.ACTUATOR_HANGS)
    signals, events = JStream(subjects.SIGNALS.name, declare=False), JStream(subjects.EVENTS.name, declare=False)
    r.publisher(subjects.signal_job("{cluster}", "{job_id}"), stream=signals, schema=JobObserved,
                title="job observation", description="The scheduler observer's view of each job (squeue, sacct).")
    r.publisher(subjects.event_reconcile("{cluster}", "{job_id}"), stream=events, schema=ReconcileStatus,
                title="reconcile status", description="What reconciling one Advice came to (each step and the end).")
    r.publisher(subjects.event_hang_evidence("{cluster}", "{job_id}"), stream=events, schema=HangEvidence,
                title="hang evidence", description="A hung job's ranks read from outside it, and who they blame.")
    return r
