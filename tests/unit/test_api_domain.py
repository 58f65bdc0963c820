"""The API's pure parts: evidence references, the nodes view, event-stream filters and frames."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from relaunch.api.domain import evidence, nodes, streaming


def test_evidence_refs_resolve_to_the_anomaly_lines_and_grouped_suspects():
    anomaly = {"summary": "XID 79", "evidence": [{"path": "a.out", "offset": 7, "text": "Xid 79"}]}
    resolved = evidence.resolve(
        ["anomaly:c.1.0.crash", "node:node1:0.9:XID 79 on node1", "node:node1:0.5:named by NCCL: twice",
         "node:node2:0.3:slow rank"], {"c.1.0.crash": anomaly})
    assert resolved["anomalies"] == [{"anomaly_id": "c.1.0.crash", "in_ledger": True, "summary": "XID 79",
                                      "evidence": anomaly["evidence"]}]
    assert resolved["suspects"] == [
        {"node": "node1", "confidence": 0.9, "reasons": ["XID 79 on node1", "named by NCCL: twice"]},
        {"node": "node2", "confidence": 0.3, "reasons": ["slow rank"]}]
    assert resolved["other"] == []


def test_unknown_or_malformed_refs_are_kept_not_dropped():
    resolved = evidence.resolve(["anomaly:gone", "node:n1:high:why", "trace:abc"], {})
    assert resolved["anomalies"][0]["in_ledger"] is False
    assert resolved["other"] == ["node:n1:high:why", "trace:abc"]


def test_nodes_view_joins_health_history_and_exclusions_across_jobs():
    view = nodes.assemble(
        health=[{"cluster": "c", "node": "n2", "verdict": "healthy", "reasons": [], "xids": [], "at": "t2"}],
        events=[{"cluster": "c", "node": "n1", "verdict": "degraded", "reasons": ["ecc"], "xids": [], "at": "t1",
                 "total": 7},
                {"cluster": "c", "node": "n1", "verdict": "failed", "reasons": ["xid 79"], "xids": [], "at": "t3",
                 "total": 7}],
        exclusions=[{"cluster": "c", "node": "n1", "job_id": "5", "name": "a", "generation": 1, "attempt": 0,
                     "status": "CONVERGED", "reason": "r", "issued_at": "t3"},
                    {"cluster": "c", "node": "n3", "job_id": "6", "name": "b", "generation": 2, "attempt": 1,
                     "status": "PENDING", "reason": "r", "issued_at": "t4"}])
    by_name = {n["node"]: n for n in view}
    assert [n["node"] for n in view] == ["n1", "n2", "n3"]
    assert by_name["n1"]["verdict"] == "unknown"  # no probe reading, only history
    assert [h["at"] for h in by_name["n1"]["history"]] == ["t3", "t1"] and by_name["n1"]["history_total"] == 7
    assert by_name["n3"]["excluded_by"][0]["job_id"] == "6"  # excluded, never probed: still listed
    assert by_name["n2"]["excluded_by"] == [] and by_name["n2"]["history"] == []


@pytest.mark.parametrize("subject", ["relaunch.event.>", "relaunch.event.anomaly.>", "relaunch.event.*.c1.>",
                                     "relaunch.event.audit.c1.42", "relaunch.event.*.*.*"])
def test_filters_within_the_events_stream_are_accepted(subject):
    assert streaming.check_filter(subject) == subject


@pytest.mark.parametrize("subject", ["", "relaunch.>", "relaunch.event", "relaunch.*.anomaly.>", "relaunch.signal.>",
                                     "relaunch.event..x", "relaunch.event.a>", "relaunch.event.>.x", "*.event.>"])
def test_filters_outside_the_events_stream_are_refused_with_a_suggestion(subject):
    with pytest.raises(streaming.FilterError, match=r"relaunch\.event\.>"):
        streaming.check_filter(subject)


def test_a_frame_is_one_event_whatever_the_message_holds():
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    raw = streaming.frame(7, "relaunch.event.audit.c.1", json.dumps({"schema": "relaunch.audit/v1",
                                                                      "detail": "a\nb\r\nc"}).encode(), at).decode()
    assert raw.endswith("\n\n") and raw.count("\n") == 3
    head, data = raw.strip().split("\n")
    assert head == "id: 7"
    payload = json.loads(data.removeprefix("data: "))
    assert payload == {"seq": 7, "subject": "relaunch.event.audit.c.1", "at": "2026-01-01T00:00:00+00:00",
                       "schema": "relaunch.audit/v1", "message": {"schema": "relaunch.audit/v1",
                                                                  "detail": "a\nb\r\nc"}}


def test_a_body_that_is_not_json_is_passed_on_as_text():
    payload = json.loads(streaming.frame(1, "s", b"\xffnot json", None).decode().split("data: ", 1)[1])
    assert payload["schema"] is None and payload["message"].endswith("not json")


@pytest.mark.parametrize("value, expected", [("41", 41), (" 7 ", 7), (None, None), ("", None), ("abc", None),
                                             ("-3", None)])
def test_last_event_id(value, expected):
    assert streaming.parse_last_event_id(value) == expected


def test_a_clearance_marks_what_came_before_it_forgotten_and_keeps_it():
    from relaunch.api.domain import nodes as node_view

    health = [{"cluster": "c", "node": "n1", "verdict": "healthy", "at": "2026-12-01T10:00:00+00:00"}]
    events = [{"cluster": "c", "node": "n1", "verdict": "failed", "reasons": ["XID 79"],
               "at": "2026-12-01T08:00:00+00:00", "total": 2},
              {"cluster": "c", "node": "n1", "verdict": "failed", "reasons": ["XID 48"],
               "at": "2026-12-01T11:00:00+00:00", "total": 2}]
    exclusions = [{"cluster": "c", "node": "n1", "job_id": "7", "generation": 1, "issued_at":
                   "2026-12-01T08:01:00+00:00"}]
    clearances = [{"cluster": "c", "node": "n1", "at": "2026-12-01T09:00:00+00:00", "actor": "ana",
                   "reason": "reseated"}]
    (n1,) = node_view.assemble(health, events, exclusions, clearances)
    assert n1["cleared"] == {"at": "2026-12-01T09:00:00+00:00", "actor": "ana", "reason": "reseated"}
    assert [(h["reasons"], h["forgotten"]) for h in n1["history"]] == [(["XID 48"], False), (["XID 79"], True)]
    assert [x["forgotten"] for x in n1["excluded_by"]] == [True]


def test_an_advice_says_what_was_really_excluded():
    from relaunch.api.domain.evidence import exclusion

    # sbatch -w node2: the decider blamed node2, the actuator kept it (the job requires it).
    steps = [{"status": "CONVERGED", "detail": "successor released; not excluded: node2, which the job requires "
                                               "(ReqNodeList=node1,node2, sbatch -w): ..."}]
    kept = exclusion({"operation": "restart", "exclude_nodes": ["node2"], "status": "CONVERGED", "reconcile": steps})
    assert kept["excluded"] == [] and kept["kept"] == ["node2"]
    assert kept["exclusion_words"].startswith("restart; node2 kept: the job requires it")
    left_out = exclusion({"operation": "restart", "exclude_nodes": ["node3"], "status": "CONVERGED", "reconcile": []})
    assert left_out == {"excluded": ["node3"], "kept": [], "exclusion_words": "restart without node3"}
    pending = exclusion({"operation": "restart", "exclude_nodes": ["node3"], "status": "PENDING", "reconcile": []})
    assert pending["exclusion_words"] == "restart, asking to leave out node3"
