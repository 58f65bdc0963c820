"""Evidence once: repeated readings of one fault are one entry with a count and a time span."""

from __future__ import annotations

import datetime as dt

from relaunch.api.domain.evidence import resolve
from relaunch.common.repeats import collapse
from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.attribution import NodeEvent, attribute
from relaunch.decider.domain.policy import History, Policy, decide

XID = "GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 1x"
TIMES = ["05:45:34", "05:45:44", "05:45:54", "05:46:04", "05:46:14", "05:46:24"]


def test_six_heartbeat_readings_of_one_xid_are_one_entry_with_count_and_span():
    entries = [f"gpu-probe: failed at {t}: {XID}" for t in TIMES]
    assert collapse(entries) == [
        "gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 6x 05:45:34-05:46:24"]


def test_different_faults_stay_apart_in_first_seen_order_and_other_entries_are_kept():
    entries = ["excluded for 2 other jobs in the last 24 h (101, 102)",
               "gpu-probe: failed at 05:45:34: " + XID,
               "gpu-probe: degraded at 05:45:40: GPU 1: thermal throttling",
               "gpu-probe: failed at 05:45:44: " + XID,
               "excluded for 2 other jobs in the last 24 h (101, 102)"]
    assert collapse(entries) == [
        "excluded for 2 other jobs in the last 24 h (101, 102), seen 2x",
        "gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 2x 05:45:34-05:45:44",
        "gpu-probe: degraded: GPU 1: thermal throttling, seen 1x 05:45:40"]


def test_collapse_is_idempotent_and_merges_old_and_new_forms():
    once = collapse([f"gpu-probe: failed at {t}: {XID}" for t in TIMES[:3]])
    assert collapse(once) == once
    merged = collapse(once + [f"gpu-probe: failed at {t}: {XID}" for t in TIMES[3:]] + ["gpu-probe: failed at "
                                                                                       "05:45:00: " + XID])
    assert merged == ["gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 7x "
                      "05:45:00-05:46:24"]


def test_readings_whose_inner_count_grows_are_still_one_fault():
    entries = [f"gpu-probe: failed at {t}: GPU 0: XID 48 (DBE), hardware, seen {n}x" for n, t in enumerate(TIMES[:3], 1)]
    assert collapse(entries) == ["gpu-probe: failed: GPU 0: XID 48 (DBE), hardware, seen 3x 05:45:34-05:45:54"]


NOW = dt.datetime(2026, 11, 29, 5, 47, tzinfo=dt.UTC)


def test_the_advice_reason_and_refs_say_a_repeated_xid_once():
    anomaly = AnomalyDetected(anomaly_id="c.1.0.crash", cluster="c", job_id="1", attempt=0, kind="crash",
                              source="log", signature_id="x", category="segfault", fault_domain="unknown",
                              action="restart", summary="s", nodes=[], detected_at=NOW)
    day = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    events = [NodeEvent("node3", "failed", (XID,), day + dt.timedelta(hours=5, minutes=45, seconds=34 + 10 * i))
              for i in range(6)]
    (suspect,) = attribute(anomaly, ["node1", "node3"], events, NOW)
    assert suspect.reasons == ("gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, "
                               "seen 6x 05:45:34-05:46:24",)
    decision = decide(History(), anomaly, Policy(), NOW, (suspect,))
    assert decision.reason.count("XID 79") == 1 and "seen 6x 05:45:34-05:46:24" in decision.reason


def test_the_api_collapses_advice_written_before_the_decider_did():
    refs = ["anomaly:a1"] + [f"node:node3:0.90:gpu-probe: failed at {t}: {XID}" for t in TIMES]
    out = resolve(refs, {})
    assert out["suspects"] == [{"node": "node3", "confidence": 0.9, "reasons": [
        "gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 6x 05:45:34-05:46:24"]}]
