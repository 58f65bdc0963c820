"""The detector's Prometheus metrics, and the one function that counts a published anomaly.

Detection latency runs from the moment the evidence was in relaunch's hands to the moment the
anomaly is on the bus: the log batch's read time (a crash line), the scheduler observation of the
failure (a failure found by the observer, including the grace spent waiting for explaining log
lines), the hang deadline passing, or the progress report that completed a straggler window.
"""

from __future__ import annotations

import datetime as dt

from prometheus_client import Counter, Gauge, Histogram

from relaunch.common.schemas import AnomalyDetected

PROBE_SILENT = Gauge("relaunch_probe_silent_nodes",
                     "Nodes whose gpu-probe heartbeats stopped (lost hosts, or a probe down while the host works)")
LINES = Counter("relaunch_log_lines_total", "Log lines read from job files")
ANOMALIES = Counter("relaunch_anomalies_total", "Anomalies published", ["kind", "category", "source"])
DETECTION_SECONDS = Histogram(
    "relaunch_detection_latency_seconds",
    "From the evidence reaching relaunch (log line read, failure observed, hang deadline, progress report) "
    "to the anomaly published",
    ["kind", "source"],
    # Log crashes land in the sub-second buckets; scheduler-reported failures wait up to the failure
    # grace (RELAUNCH_DETECTOR_FAILURE_GRACE_S) for explaining lines; a slow hang sweep or a backlog shows in the tail.
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)


def anomaly_published(anomaly: AnomalyDetected, evidence_at: dt.datetime, now: dt.datetime) -> None:
    ANOMALIES.labels(anomaly.kind, anomaly.category, anomaly.source).inc()
    DETECTION_SECONDS.labels(anomaly.kind, anomaly.source).observe(max(0.0, (now - evidence_at).total_seconds()))
LOG_REFUSED = Counter("relaunch_log_reads_refused_total",
                      "Job output files not read because the job's user could not read them or they lie outside "
                      "the allowed roots (docs/security.md)")
PROGRESS_REFUSED = Counter("relaunch_progress_refused_total",
                           "Progress reports not bound to their job (no key, or a key never printed in the job's "
                           "own log: docs/security.md)", ["reason"])
