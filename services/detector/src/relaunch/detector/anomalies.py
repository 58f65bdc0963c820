"""The one way an anomaly leaves the detector, whichever path found it (a crash in a log or in the
scheduler's report, a hang, a straggler).

Order matters: the anomaly is published first, under its id as the Msg-Id (JetStream drops a
duplicate, so a pass retried after a failure here never publishes twice), and only then marked in
the hot state; a crash between the two publishes again on the retry, and the Msg-Id absorbs it.
"""

from __future__ import annotations

import datetime as dt
import logging

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.clock import utcnow
from relaunch.common.schemas import AnomalyDetected

from .adapters.hotstate import HotState
from .metrics import anomaly_published

log = logging.getLogger(__name__)


class AnomalyPublisher:
    def __init__(self, bus: Bus, state: HotState) -> None:
        self.bus, self.state = bus, state

    async def publish(self, anomaly: AnomalyDetected, evidence_at: dt.datetime) -> None:
        """Publish, mark the attempt as having this anomaly, count it with its detection latency
        (from `evidence_at`, see metrics.py) and log it."""
        await self.bus.publish(subjects.event_anomaly(anomaly.cluster, anomaly.job_id), anomaly,
                               msg_id=anomaly.anomaly_id)
        await self.state.mark_anomaly(anomaly.cluster, anomaly.job_id, anomaly.attempt, anomaly.kind,
                                      anomaly.signature_id)
        anomaly_published(anomaly, evidence_at, utcnow())
        log.info("anomaly %s: %s (%s)", anomaly.anomaly_id, anomaly.category, anomaly.summary)
