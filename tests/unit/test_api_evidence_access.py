"""Who reads a job's log lines through the API (issue 35): where a token is configured, the evidence
excerpts quoted in anomalies and Advice (job view, progress markers, live events) need it; the rest
of the ledger stays readable without one. Without a token configured, reads are open as before."""

from __future__ import annotations

import json

import pytest
from test_api_fakes import SAMPLE_EVENTS, Fakes, T0, client

from relaunch.api.adapters.events import StreamedEvent
from relaunch.api.domain.evidence import withhold_lines

TOKEN = "evidence-test-token-0123456789"
LINE = "NVRM: Xid (PCI:0000:3b:00): 79"


@pytest.fixture
def fakes():
    fakes = Fakes()
    fakes.events.events = [*SAMPLE_EVENTS, StreamedEvent(43, "relaunch.event.anomaly.local.101", json.dumps({
        "schema": "relaunch.anomaly/v1", "cluster": "local", "job_id": "101", "summary": "GPU fell off the bus",
        "evidence": [{"path": "/jobs/train-101.out", "offset": 5120, "text": LINE}]}).encode(), T0)]
    return fakes


def read_all(api, headers=None) -> dict[str, str]:
    return {path: api.get(path, headers=headers or {}).text
            for path in ("/v1/jobs/local/101", "/v1/jobs/local/101/progress", "/v1/events/stream", "/v1/jobs",
                         "/v1/advice", "/v1/nodes")}


def test_without_a_token_configured_reads_stay_open(fakes):
    with client(fakes) as api:
        seen = read_all(api)
    for path in ("/v1/jobs/local/101", "/v1/jobs/local/101/progress", "/v1/events/stream"):
        assert LINE in seen[path], path


def test_with_a_token_configured_log_lines_need_it(fakes, tmp_path):
    with client(fakes, tmp_path, token=TOKEN) as api:
        anonymous = read_all(api)
        wrong = read_all(api, {"Authorization": "Bearer not-the-token-at-all-000"})
        holder = read_all(api, {"Authorization": f"Bearer {TOKEN}"})
        job = api.get("/v1/jobs/local/101").json()
    for path, text in [*anonymous.items(), *wrong.items()]:
        assert LINE not in text, f"{path} quoted a log line without the token"
    for path in ("/v1/jobs/local/101", "/v1/jobs/local/101/progress", "/v1/events/stream"):
        assert LINE in holder[path], path
    # What stays readable: the job, its anomaly's summary and nodes, the Advice and its suspects.
    anomaly = job["anomalies"][0]
    assert anomaly["evidence"] == [] and "bearer token" in anomaly["evidence_withheld"]
    assert anomaly["summary"] and anomaly["nodes"] == ["node1"] and job["evidence_withheld"]
    assert job["advice"][0]["evidence"]["anomalies"][0]["evidence"] == []
    assert job["advice"][0]["evidence"]["suspects"][0]["node"] == "node1"
    assert '"evidence_withheld"' in anonymous["/v1/events/stream"]


def test_an_unreadable_token_file_withholds_too(fakes, tmp_path):
    with client(fakes, token_file=str(tmp_path / "missing")) as api:
        job = api.get("/v1/jobs/local/101", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert job["anomalies"][0]["evidence"] == [] and "cannot be read" in job["evidence_withheld"]


def test_withholding_leaves_the_ledger_rows_alone():
    detail = Fakes().ledger.details[("local", "101")]
    before = json.dumps(detail, sort_keys=True)
    assert withhold_lines(detail, "") is detail
    out = withhold_lines(detail, "no token")
    assert json.dumps(detail, sort_keys=True) == before and out["anomalies"][0]["evidence"] == []


def test_a_hangs_stack_frames_on_the_event_stream_need_the_token_too(tmp_path):
    """HangEvidence's frames are the job's own text (issue 37): withheld on the stream as in the job view."""
    from test_api_fakes import sample_hang_job

    hang = sample_hang_job()["hang_evidence"][0]
    fakes = Fakes()
    fakes.ledger.details[("local", "103")] = sample_hang_job()
    fakes.events.events = [StreamedEvent(44, "relaunch.event.hang_evidence.local.103", json.dumps(hang).encode(), T0)]
    frame = "clock_nanosleep (/usr/lib/x86_64-linux-gnu/libc.so.6)"
    with client(fakes, tmp_path, token=TOKEN) as api:
        anonymous = api.get("/v1/events/stream").text + api.get("/v1/jobs/local/103").text
        holder = api.get("/v1/events/stream", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert frame not in anonymous and "rank 1 on node2 is stuck in a native call" in anonymous
    assert '"evidence_withheld"' in anonymous and frame in holder
