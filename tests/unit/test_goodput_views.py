"""Goodput where people read it (issue 40, item 2): the API's job and fleet figures from ledger rows
(relaunch.api.domain.lost_time), `relaunch jobs show` in words and in --json, and the fleet gauges."""

from __future__ import annotations

import datetime as dt
import json

from prometheus_client import REGISTRY
from typer.testing import CliRunner

from relaunch.api.domain.lost_time import expected_resume, fleet_view, job_ended_at, job_view
from relaunch.api.metrics import set_goodput
from relaunch.client import cli
from relaunch.client.goodput_words import duration, goodput_lines

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def t(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


JOB = {"cluster": "demo", "job_id": "7", "name": "train", "state": "RUNNING", "verdict": "watching",
       "verdict_reason": "", "updated_at": t(2000)}
ATTEMPTS = [{"index": 0, "state": "REQUEUED", "nodes": ["node1", "node2"], "exit_code": None, "first_seen": t(-30),
             "running_at": t(0), "ended_at": t(1315), "high_step": 1300},
            {"index": 1, "state": "RUNNING", "nodes": ["node1", "node3"], "exit_code": None, "first_seen": t(1314),
             "running_at": t(1330), "ended_at": None, "high_step": None}]
ANOMALIES = [{"attempt": 0, "kind": "crash", "fault_domain": "hardware", "detected_at": t(1312), "last_step": 1300,
              "category": "xid_79", "action": "restart_excluding", "summary": "GPU fell off the bus", "evidence": []},
             {"attempt": 0, "kind": "straggler", "fault_domain": "unknown", "detected_at": t(1000), "last_step": 900,
              "category": "straggler", "action": "restart", "summary": "slow", "evidence": []}]
FACTS = [{"attempt": 0, "kind": "first_step", "step": 1, "at": t(10)},
         {"attempt": 0, "kind": "save_started", "step": 1000, "at": t(1009)},
         {"attempt": 0, "kind": "saved", "step": 1000, "at": t(1009)},
         {"attempt": 0, "kind": "last_progress", "step": 1300, "at": t(1309)},
         {"attempt": 1, "kind": "first_step", "step": 1001, "at": t(1390)},
         {"attempt": 1, "kind": "caught_up", "step": 1300, "at": t(1710)}]
AUDIT = [{"service": "decider", "action": "restart", "at": t(1312),
          "detail": json.dumps({"attempt": 0, "rule": "within_budget", "resume_step": 1000, "generation": 1})},
         {"service": "actuator", "action": "requeue", "detail": "not json", "at": t(1313)}]


def view():
    return job_view(JOB, ATTEMPTS, ANOMALIES, FACTS, AUDIT, t(2000))


def test_the_job_view_has_each_failures_parts_and_where_it_resumed():
    figures = view()
    (failure,) = figures["failures"]  # the straggler is a slow run, not a failure
    assert failure["parts_s"]["detection"] == 3 and failure["parts_s"]["recovery"] == 18
    assert failure["parts_s"]["startup"] == 60 and round(failure["parts_s"]["recomputation"]) == 300
    assert round(failure["parts_s"]["warmup"]) == 20
    assert failure["expected_resume_step"] == 1000 and failure["resumed_as_expected"] is True
    assert figures["wall_s"] == 2000 and 0 < figures["ettr"] < 1
    assert figures["checkpoints"] == [{"attempt": 0, "step": 1000, "at": t(1009).isoformat()}]
    json.dumps(figures)  # what the API returns as is


def test_a_successor_that_began_below_the_expected_checkpoint_is_said():
    facts = [f if f["kind"] != "first_step" or f["attempt"] != 1 else {**f, "step": 3} for f in FACTS]
    (failure,) = job_view(JOB, ATTEMPTS, ANOMALIES, facts, AUDIT, t(2000))["failures"]
    assert failure["resumed_as_expected"] is False
    assert "expected to resume from step 1000, but began at step 3" in "\n".join(
        goodput_lines(job_view(JOB, ATTEMPTS, ANOMALIES, facts, AUDIT, t(2000))))


def test_expected_resume_reads_only_the_deciders_restarts():
    assert expected_resume(AUDIT) == {0: 1000}
    assert expected_resume([{"service": "decider", "action": "stop", "detail": '{"attempt": 3, "resume_step": 9}'}]) \
        == {}


def test_a_job_ends_for_good_only_in_a_final_state_without_recovery():
    assert job_ended_at(JOB, ATTEMPTS) is None
    done = {**JOB, "state": "COMPLETED", "verdict": "watching"}
    assert job_ended_at(done, ATTEMPTS) == t(1315)
    assert job_ended_at({**done, "verdict": "recovering"}, ATTEMPTS) is None


def test_jobs_show_says_the_lost_time_in_words(monkeypatch):
    data = {"job": {**JOB, "updated_at": JOB["updated_at"].isoformat()}, "attempts": [], "anomalies": [],
            "advice": [], "audit": [], "goodput": view()}
    monkeypatch.setattr(cli, "_get", lambda path: data)
    result = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "goodput: ETTR" in text and "lost 6 min 41 s in 1 failure" in text
    assert "checkpoints saved: step 1000 (attempt 0, 12:16:49)" in text
    assert ("failure of attempt 0 (hardware): lost 6 min 41 s: recomputation 5 min 0 s since the checkpoint at "
            "step 1000, failed at step 1300, detection 3.0 s, recovery 18 s, start-up 1 min 0 s, warm-up 20 s; "
            "resumed from the checkpoint at step 1000, as expected") in text
    result = CliRunner().invoke(cli.app, ["jobs", "show", "7", "--cluster", "demo", "--json"])
    assert json.loads(result.output)["goodput"]["failures"][0]["lost_s"] == data["goodput"]["failures"][0]["lost_s"]


def test_words_for_a_job_without_steps_and_durations():
    lines = goodput_lines({"ettr": None, "failures": [], "checkpoints": [], "lost_s": 0.0})
    assert lines == ["goodput: ETTR not known (no step seen); lost 0.0 s in 0 failures", "checkpoints saved: none seen"]
    assert goodput_lines(None) == []
    assert [duration(v) for v in (None, 0.42, 59, 61, 7260)] == ["?", "0.4 s", "59 s", "1 min 1 s", "2 h 1 min"]


def test_the_fleet_view_and_its_gauges():
    done = {**JOB, "job_id": "8", "state": "COMPLETED"}
    fleet = fleet_view([(JOB, ATTEMPTS, ANOMALIES, FACTS), (done, ATTEMPTS[:1], [], FACTS[:1])], t(2000), t(-60))
    assert fleet["failures"] == 1 and fleet["lost_by_class_s"]["hardware"]["detection"] == 3
    assert fleet["lost_by_day_s"]["2026-12-01"]["recovery"] == 18
    assert fleet["mttr_s"] == 3 + 18 + 60
    assert 0 < fleet["ettr"] < 1 and fleet["node_hours"] > 0
    assert abs(fleet["failures_per_1000_node_hours"] - 1000 / fleet["node_hours"]) < 0.5
    set_goodput(fleet)
    assert REGISTRY.get_sample_value("relaunch_fleet_lost_seconds", {"part": "recovery", "fault_class": "hardware"}) \
        == 18
    assert REGISTRY.get_sample_value("relaunch_fleet_mttr_seconds") == 81
    assert REGISTRY.get_sample_value("relaunch_fleet_failures") == 1
    later = fleet_view([(JOB, ATTEMPTS, ANOMALIES, FACTS)], t(2000), t(1500))  # the failure is before the window
    assert later["failures"] == 0 and later["mttr_s"] is None
    set_goodput(later)
    assert REGISTRY.get_sample_value("relaunch_fleet_lost_seconds", {"part": "recovery", "fault_class": "hardware"}) \
        is None
