"""Time to recover: from the anomaly's detected_at to the actuator's CONVERGED for the restart it caused.

The Advice names its anomaly in evidence_refs ("anomaly:<id>"); the anomaly itself is the last
message on its job's anomaly subject in EVENTS (one anomaly per attempt and kind, and the attempt
being restarted is the job's newest). When it is not there any more (stream limits) or a newer
anomaly took its place, nothing is observed rather than a wrong figure. Queueing of the successor
after CONVERGED is the scheduler's business and not counted.
"""

from __future__ import annotations

import datetime as dt
import logging

from prometheus_client import Histogram
from pydantic import ValidationError

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Advice, AnomalyDetected

log = logging.getLogger(__name__)

TIME_TO_RECOVER = Histogram(
    "relaunch_time_to_recover_seconds",
    "From an anomaly detected to its restart Advice CONVERGED (successor unheld, eligible or running)",
    ["kind"],
    # Includes the detector's grace for a scheduler-reported failure, Slurm's requeue to PENDING and
    # the steps of the restart: tens of seconds on a healthy cluster, minutes under rate limiting.
    buckets=(5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600),
)


def anomaly_ref(advice: Advice) -> str | None:
    return next((ref.removeprefix("anomaly:") for ref in advice.evidence_refs if ref.startswith("anomaly:")), None)


async def observe_recovery(bus: Bus, advice: Advice, converged_at: dt.datetime) -> float | None:
    """Observe the time to recover of a converged restart; returns the seconds, or None when unknown."""
    wanted = anomaly_ref(advice)
    if advice.operation != "restart" or wanted is None:
        return None
    try:
        last = await bus.last_message(subjects.EVENTS, subjects.event_anomaly(advice.cluster, advice.job_id))
        if last is None:
            return None
        anomaly = AnomalyDetected.model_validate_json(last[0])
    except (TemporaryError, TimeoutError, ValidationError) as exc:  # a figure lost, never a reconcile
        log.debug("no anomaly for the time to recover of %s/%s: %s", advice.cluster, advice.job_id, exc)
        return None
    if anomaly.anomaly_id != wanted:
        return None
    seconds = max(0.0, (converged_at - anomaly.detected_at).total_seconds())
    TIME_TO_RECOVER.labels(anomaly.kind).observe(seconds)
    return seconds
