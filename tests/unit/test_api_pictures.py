"""The pictures' data (relaunch.api.domain.charts and fleet): pure, from ledger rows and history buckets."""

from __future__ import annotations

import datetime as dt

from relaunch.api.domain.charts import progress_chart
from relaunch.api.domain.fleet import fleet
from relaunch.common import progress_history as ph

T0 = dt.datetime(2026, 12, 1, 5, 45, tzinfo=dt.UTC)


def iso(s: float) -> str:
    return (T0 + dt.timedelta(seconds=s)).isoformat()


XID = "gpu-probe: failed at 05:45:34: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 1x"
DETAIL = {
    "attempts": [{"index": 0, "state": "REQUEUED", "nodes": ["n1", "n2"], "first_seen": iso(0)},
                 {"index": 1, "state": "RUNNING", "nodes": ["n1", "n3"], "first_seen": iso(40)}],
    "anomalies": [{"kind": "hang", "category": "hang", "fault_domain": "unknown", "action": "restart", "attempt": 0,
                   "summary": "no progress since step 6", "evidence": [], "detected_at": iso(30)},
                  {"kind": "straggler", "category": "straggler", "fault_domain": "unknown", "action": "report",
                   "attempt": 1, "summary": "megatron:throughput rate at most 90 in each of the last 3 windows of 5 "
                   "samples (since 05:46) is 40% below the baseline 150 (median of the 4 windows before); threshold 30%",
                   "evidence": [], "detected_at": iso(70)}],
    "advice": [{"generation": 1, "attempt": 0, "operation": "restart", "exclude_nodes": ["n2"], "status": "CONVERGED",
                "issued_at": iso(30.5), "reason": "r",
                "evidence": {"suspects": [{"node": "n2", "confidence": 0.9, "reasons": [
                    "gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 6x 05:45:34-05:46:24"]}]},
                "reconcile": [{"generation": 1, "status": "PENDING", "step": "requeuehold", "reason": "step taken",
                               "detail": "", "at": iso(31)}]}],
}


def test_each_bucket_goes_to_the_attempt_running_then_and_every_event_is_a_marker():
    points = [(T0.timestamp() + s, step, 150.0, 1.0) for s, step in ((5, 1), (10, 3), (20, 6), (45, 1), (60, 9))]
    buckets, width = ph.add({}, ph.BASE_WIDTH_S, points)
    chart = progress_chart(DETAIL, sorted(buckets.values(), key=lambda b: b.start), width)
    steps = {a["index"]: [p["step"] for p in a["points"]] for a in chart["attempts"]}
    assert steps == {0: [1, 3, 6], 1: [1, 9]}
    kinds = [m["kind"] for m in chart["markers"]]
    assert kinds == ["anomaly", "advice", "reconcile", "restart", "anomaly"]
    advice = next(m for m in chart["markers"] if m["kind"] == "advice")
    assert advice["t"] == T0.timestamp() + 30.5 and "without n2" in advice["label"]
    assert advice["evidence"] == ["n2 (0.9): gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), "
                                  "hardware, seen 6x 05:45:34-05:46:24"]
    (silence, baseline) = chart["guides"]
    assert silence["kind"] == "hang_silence" and silence["from"] == T0.timestamp() + 20 and silence["to"] == \
        T0.timestamp() + 30
    assert baseline == {**baseline, "kind": "straggler_baseline", "baseline": 150.0, "threshold": 105.0}


def test_without_progress_history_the_markers_are_still_drawn():
    chart = progress_chart(DETAIL, [], 0)
    assert [a["points"] for a in chart["attempts"]] == [[], []] and len(chart["markers"]) == 5
    assert [g["kind"] for g in chart["guides"]] == ["straggler_baseline"]


def test_the_fleet_counts_failures_by_day_class_and_action_and_the_time_to_recover():
    rows = [{"cluster": "c", "job_id": "7", **a} for a in DETAIL["anomalies"]]
    advice = [{"cluster": "c", "job_id": "7", **a, "evidence_refs": [f"node:n2:0.90:{XID}", f"node:n2:0.90:{XID}"]}
              for a in DETAIL["advice"]]
    attempts = [{"cluster": "c", "job_id": "7", **a} for a in DETAIL["attempts"]]
    stops = [{"cluster": "c", "job_id": "8", "at": iso(100)}]
    out = fleet(rows, advice, attempts, stops, now=T0 + dt.timedelta(hours=1), days=3)
    today = out["days"][-1]
    assert today["by_class"] == {"hang": 1, "straggler": 1} and today["by_action"] == {"restart": 1, "report": 1}
    assert (today["restarts"], today["stops"]) == (1, 1) and [d["day"] for d in out["days"]][0] == "2026-11-29"
    (recovery,) = out["recoveries"]
    assert recovery["lost_s"] == 10.0 and out["mttr_s"] == 10.0 and out["unrecovered"] == 1
    (node,) = out["nodes"]
    assert node["node"] == "n2" and node["times"] == 1 and node["jobs"] == ["7"]
    assert node["reasons"] == ["gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, "
                               "seen 2x 05:45:34"]


def test_the_last_steps_before_a_crash_stay_with_the_crashed_attempt():
    # relaunch restarts within 1-2 s: attempt 0's last reports (at 10.1 s) fall inside the slack before
    # attempt 1's first_seen (12 s); the crash was detected at 10.5 s (issue 40).
    detail = {"attempts": [{"index": 0, "state": "REQUEUED", "nodes": ["n1"], "first_seen": iso(0)},
                           {"index": 1, "state": "RUNNING", "nodes": ["n1"], "first_seen": iso(12)}],
              "anomalies": [{"kind": "crash", "category": "segfault", "fault_domain": "unknown", "action": "restart",
                             "attempt": 0, "summary": "s", "evidence": [], "detected_at": iso(10.5)}],
              "advice": []}
    points = [(T0.timestamp() + s, step, 1.0, 1.0) for s, step in ((5.1, 1), (9.2, 8), (10.1, 9), (11.3, 0), (13.1, 1))]
    buckets, width = ph.add({}, 1, points)
    chart = progress_chart(detail, sorted(buckets.values(), key=lambda b: b.start), width)
    steps = {a["index"]: [p["step"] for p in a["points"]] for a in chart["attempts"]}
    assert steps == {0: [1, 8, 9], 1: [0, 1]}, steps
