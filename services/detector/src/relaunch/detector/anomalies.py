"""The one way an anomaly leaves the detector, whichever path found it (a crash in a log or in the
scheduler's report, a hang, a straggler).

Order matters: the anomaly is published first, under its id as the Msg-Id (JetStream drops a
duplicate, so a pass retried after a failure here never publishes twice), and only then marked in
the hot state; a crash between the two publishes again on the retry, and the Msg-Id absorbs it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.clock import utcnow
from relaunch.common.schemas import AnomalyDetected, CheckpointFact

from .adapters.hotstate import HotState
from .checkpoint_facts import FactPublisher
from .domain.checkpoints import CATCH_UP_FIELD, catch_up_value
from .domain.lost_nodes import Progress
from .metrics import anomaly_published

log = logging.getLogger(__name__)


class AnomalyPublisher:
    def __init__(self, bus: Bus, state: HotState) -> None:
        self.bus, self.state = bus, state
        self.progress: Callable[[str, int], Awaitable[Progress]] | None = None
        """(job, attempt) -> its last progress (ProgressTracker.progress_of, set by main): a failure's
        last_progress fact, and the step the next attempt must pass to be back (docs/goodput.md)."""
        self.facts = FactPublisher(bus)

    async def publish(self, anomaly: AnomalyDetected, evidence_at: dt.datetime) -> None:
        """Publish, mark the attempt as having this anomaly, count it with its detection latency
        (from `evidence_at`, see metrics.py) and log it."""
        await self.bus.publish(subjects.event_anomaly(anomaly.cluster, anomaly.job_id), anomaly,
                               msg_id=anomaly.anomaly_id)
        if anomaly.kind != "straggler":  # a straggler is a slow run, not a failure
            await self._progress_facts(anomaly)
        await self.state.mark_anomaly(anomaly.cluster, anomaly.job_id, anomaly.attempt, anomaly.kind,
                                      anomaly.signature_id)
        anomaly_published(anomaly, evidence_at, utcnow())
        log.info("anomaly %s: %s (%s)", anomaly.anomaly_id, anomaly.category, anomaly.summary)

    async def _progress_facts(self, anomaly: AnomalyDetected) -> None:
        """The failed attempt's last progress, as a fact, and the step its successor must pass (kept in the
        job's hot state for the successor's caught_up fact). Before the anomaly is marked: a failure here
        has the anomaly published again (the Msg-Id absorbs it) and these written again."""
        if self.progress is None:
            return
        last = await self.progress(anomaly.job_id, anomaly.attempt)
        if last.at is not None:
            await self.facts.publish([CheckpointFact(
                cluster=anomaly.cluster, job_id=anomaly.job_id, attempt=anomaly.attempt, kind="last_progress",
                step=last.step, at=dt.datetime.fromtimestamp(last.at, dt.UTC), source="detector")])
        step = max((s for s in (anomaly.last_step, last.step) if s is not None), default=None)
        if step is not None:
            await self.state.note(anomaly.cluster, anomaly.job_id, CATCH_UP_FIELD,
                                  catch_up_value(anomaly.attempt + 1, step))
