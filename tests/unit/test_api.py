"""The HTTP API over in-memory backends: what each endpoint answers, how it fails, who may change state."""

from __future__ import annotations

import asyncpg
import pytest
from test_api_fakes import Fakes, client

from relaunch.common.settings import SettingsError, load_settings
from relaunch.api.settings import ApiSettings

TOKEN = "s3cret-token-for-tests-0123456789"


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture
def api(fakes):
    with client(fakes) as c:
        yield c


# ---- reading the ledger ---------------------------------------------------------------------

def test_jobs_pass_filters_and_paging_and_report_the_total(api, fakes):
    resp = api.get("/v1/jobs", params={"cluster": "local", "state": ["RUNNING", "PENDING"], "verdict": "watching",
                                       "limit": 1, "offset": 0})
    assert resp.status_code == 200
    body = resp.json()
    assert [j["job_id"] for j in body["jobs"]] == ["101"]
    assert (body["total"], body["limit"], body["offset"]) == (1, 1, 0)
    assert fakes.ledger.calls[-1] == ("jobs", {"cluster": "local", "states": ["RUNNING", "PENDING"],
                                               "verdicts": ["watching"], "limit": 1, "offset": 0})


def test_jobs_total_counts_past_the_page(api):
    body = api.get("/v1/jobs", params={"limit": 1, "offset": 1}).json()
    assert [j["job_id"] for j in body["jobs"]] == ["102"] and body["total"] == 2


def test_a_limit_past_the_cap_is_refused_with_a_json_message_naming_the_parameter(api):
    resp = api.get("/v1/jobs", params={"limit": 5000})
    assert resp.status_code == 422
    body = resp.json()
    assert body["error"] == "invalid request"
    assert "limit" in body["detail"] and "1000" in body["detail"]
    assert body["fields"][0]["got"] == "5000"


def test_job_detail_keeps_the_keys_the_cli_reads_and_resolves_advice_evidence(api):
    body = api.get("/v1/jobs/local/101").json()
    assert {"job", "attempts", "anomalies", "advice", "audit"} <= set(body)
    advice = body["advice"][0]
    assert [s["step"] for s in advice["reconcile"]] == ["requeuehold", "exclude", ""]
    assert advice["evidence"]["suspects"] == [{"node": "node1", "confidence": 0.9,
                                               "reasons": ["XID 79 (hardware) on an allocated node"]}]
    assert "fallen off the bus" in advice["evidence"]["anomalies"][0]["evidence"][0]["text"]


def test_an_unknown_job_is_a_404_that_says_what_to_check(api):
    resp = api.get("/v1/jobs/local/999")
    assert resp.status_code == 404
    assert resp.json()["error"] == "not found"
    assert "not in the ledger" in resp.json()["detail"] and "opted in" in resp.json()["detail"]


def test_an_unknown_path_is_json_pointing_at_the_docs(api):
    resp = api.get("/v2/nothing")
    assert resp.status_code == 404 and "/docs" in resp.json()["detail"]


def test_active_advice_asks_the_ledger_for_active_only(api, fakes):
    body = api.get("/v1/advice", params={"active": "true"}).json()
    assert fakes.ledger.calls[-1][1]["active"] is True
    assert body["advice"] == [] and body["total"] == 0  # the sample's only advice has converged
    body = api.get("/v1/advice").json()
    assert fakes.ledger.calls[-1][1]["active"] is None
    assert body["advice"][0]["exclude_nodes"] == ["node1"]


def test_nodes_show_health_history_and_the_jobs_that_excluded_them(api, fakes):
    body = api.get("/v1/nodes", params={"history": 5}).json()
    node1 = next(n for n in body["nodes"] if n["node"] == "node1")
    assert node1["verdict"] == "failed" and node1["history_total"] == 2
    assert [h["verdict"] for h in node1["history"]] == ["failed", "degraded"]  # newest first
    assert node1["excluded_by"][0]["job_id"] == "101"
    assert fakes.ledger.calls[-1] == ("nodes", {"cluster": None, "history": 5})


def test_the_ledger_being_down_is_a_503_with_a_hint(api, fakes):
    fakes.ledger.fail_with = OSError("connection refused")
    resp = api.get("/v1/jobs")
    assert resp.status_code == 503
    assert "Postgres" in resp.json()["detail"] and "RELAUNCH_DATABASE_URL" in resp.json()["hint"]


def test_a_ledger_without_the_api_tables_says_to_run_the_migrations(api, fakes):
    fakes.ledger.fail_with = asyncpg.exceptions.UndefinedTableError('relation "operator_overrides" does not exist')
    resp = api.get("/v1/jobs")
    assert resp.status_code == 503 and "decider" in resp.json()["hint"]


# ---- health, metrics, OpenAPI ---------------------------------------------------------------

def test_healthz_follows_postgres_and_reports_nats_without_failing_on_it(api, fakes):
    fakes.events.connected = False
    resp = api.get("/healthz")
    assert resp.status_code == 200 and resp.json()["checks"] == {"postgres": True, "nats": False}
    fakes.ledger.up = False
    assert api.get("/healthz").status_code == 503


def test_metrics_label_requests_by_route_template_not_by_job(api):
    api.get("/v1/jobs/local/101")
    text = api.get("/metrics").text
    assert 'relaunch_api_requests_total{method="GET",route="/v1/jobs/{cluster}/{job_id}",status="200"}' in text
    assert "/v1/jobs/local/101" not in text


def test_openapi_describes_every_endpoint(api):
    paths = api.get("/openapi.json").json()["paths"]
    assert {"/v1/jobs", "/v1/jobs/{cluster}/{job_id}", "/v1/jobs/{cluster}/{job_id}/mode", "/v1/advice",
            "/v1/nodes", "/v1/events/stream", "/healthz", "/metrics"} <= set(paths)
    assert api.get("/docs").status_code == 200


# ---- changing state: the bearer token -------------------------------------------------------

def test_without_a_token_file_changing_state_is_off_and_says_how_to_turn_it_on(api, fakes):
    resp = api.post("/v1/jobs/local/101/mode", json={"mode": "observe"}, headers={"Authorization": "Bearer x" * 3})
    assert resp.status_code == 503
    assert "RELAUNCH_API_TOKEN_FILE" in resp.json()["detail"]
    assert fakes.overrides.recorded == []


def test_a_missing_or_wrong_token_is_401(fakes, tmp_path):
    with client(fakes, tmp_path, token=TOKEN) as api:
        missing = api.post("/v1/jobs/local/101/mode", json={"mode": "observe"})
        wrong = api.post("/v1/jobs/local/101/mode", json={"mode": "observe"},
                         headers={"Authorization": "Bearer not-the-token-at-all"})
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in missing.json()["detail"]
    assert wrong.status_code == 401 and "not the one" in wrong.json()["detail"]
    assert fakes.overrides.recorded == []


def test_the_right_token_records_the_override_and_publishes_an_audit_entry(fakes, tmp_path):
    with client(fakes, tmp_path, token=TOKEN) as api:
        resp = api.post("/v1/jobs/local/101/mode", json={"mode": "observe", "reason": "canary", "actor": "ana"},
                        headers={"Authorization": f"Bearer {TOKEN}"})
        detail = api.get("/v1/jobs/local/101").json()
    assert resp.status_code == 201, resp.text
    assert resp.json()["override"]["mode"] == "observe" and resp.json()["audited"] is True
    assert detail["overrides"][0]["mode"] == "observe" and detail["job"]["mode_override"] == "observe"
    subject, entry, msg_id = fakes.events.published[0]
    assert subject == "relaunch.event.audit.local.101"
    assert entry.action == "mode_override" and '"mode": "observe"' in entry.detail and msg_id == entry.idempotency_key


def test_an_override_still_records_when_nats_is_down_and_says_the_audit_was_not_sent(fakes, tmp_path):
    fakes.events.connected = False
    with client(fakes, tmp_path, token=TOKEN) as api:
        resp = api.post("/v1/jobs/local/101/mode", json={"mode": "act"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 201 and resp.json()["audited"] is False and "NATS" in resp.json()["note"]


@pytest.mark.parametrize("path, body, status", [
    ("/v1/jobs/local/999/mode", {"mode": "observe"}, 404),      # not in the ledger
    ("/v1/jobs/local/101/mode", {"mode": "yolo"}, 422),         # not a mode
    ("/v1/jobs/local/101/mode", {"mode": "act", "x": 1}, 422),  # unknown field
    ("/v1/jobs/loc%20al/101/mode", {"mode": "act"}, 422),       # not a cluster name
    ("/v1/jobs/local/abc/mode", {"mode": "act"}, 422),          # not a Slurm job id
])
def test_bad_override_requests_are_refused_before_anything_is_recorded(fakes, tmp_path, path, body, status):
    with client(fakes, tmp_path, token=TOKEN) as api:
        resp = api.post(path, json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == status, resp.text
    assert resp.json()["detail"] and fakes.overrides.recorded == []


def test_a_rotated_token_file_takes_effect_without_a_restart(fakes, tmp_path):
    with client(fakes, tmp_path, token=TOKEN) as api:
        (tmp_path / "api-token").write_text("a-brand-new-token-after-rotation")
        old = api.post("/v1/jobs/local/101/mode", json={"mode": "act"}, headers={"Authorization": f"Bearer {TOKEN}"})
        new = api.post("/v1/jobs/local/101/mode", json={"mode": "act"},
                       headers={"Authorization": "Bearer a-brand-new-token-after-rotation"})
    assert (old.status_code, new.status_code) == (401, 201)


def test_a_short_token_is_a_configuration_error_not_a_password(fakes, tmp_path):
    with client(fakes, tmp_path, token="short") as api:
        resp = api.post("/v1/jobs/local/101/mode", json={"mode": "act"}, headers={"Authorization": "Bearer short"})
    assert resp.status_code == 503 and "16" in resp.json()["detail"]


def test_the_token_itself_cannot_be_given_as_a_setting(monkeypatch):
    monkeypatch.setenv("RELAUNCH_API_TOKEN", TOKEN)
    with pytest.raises(SettingsError, match="RELAUNCH_API_TOKEN"):
        load_settings(ApiSettings)


# ---- CORS -----------------------------------------------------------------------------------

def test_cors_is_off_by_default(api):
    preflight = api.options("/v1/jobs", headers={"Origin": "https://elsewhere.example",
                                                 "Access-Control-Request-Method": "GET"})
    simple = api.get("/v1/jobs", headers={"Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in preflight.headers
    assert "access-control-allow-origin" not in simple.headers


def test_cors_allows_only_the_configured_origins(fakes):
    with client(fakes, cors_origins=["https://ops.example"]) as api:
        allowed = api.get("/v1/jobs", headers={"Origin": "https://ops.example"})
        other = api.get("/v1/jobs", headers={"Origin": "https://elsewhere.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://ops.example"
    assert "access-control-allow-origin" not in other.headers


# ---- live events ----------------------------------------------------------------------------

def test_event_stream_sends_one_frame_per_message_with_its_sequence(api, fakes):
    resp = api.get("/v1/events/stream", params={"subject": "relaunch.event.>"})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in resp.text.split("\n\n") if f.startswith("id:")]
    assert [f.splitlines()[0] for f in frames] == ["id: 41", "id: 42"]
    assert all(len(f.splitlines()) == 2 for f in frames)  # a newline in a reason never splits an event
    assert '"subject":"relaunch.event.reconcile.local.101"' in frames[1]
    assert fakes.events.subscriptions[0][2].closed >= 1  # the consumer is released when the stream ends
    assert api.app.state.open_streams == 0


def test_event_stream_sends_keep_alives_when_quiet(api, fakes):
    fakes.events.quiet_first = True
    assert ": keep-alive" in api.get("/v1/events/stream").text


def test_event_stream_resumes_after_last_event_id_or_starts_at_a_time(api, fakes):
    resumed = api.get("/v1/events/stream", headers={"Last-Event-ID": "41"})
    assert [f.splitlines()[0] for f in resumed.text.split("\n\n") if f.startswith("id:")] == ["id: 42"]
    api.get("/v1/events/stream", params={"since": "2026-03-01T12:00:00"})
    since = fakes.events.subscriptions[-1][1]["since"]
    assert since.isoformat() == "2026-03-01T12:00:00+00:00"  # a zone-less time is UTC


@pytest.mark.parametrize("subject", ["relaunch.>", "relaunch.advice.>", "relaunch.*.anomaly.>", "relaunch.event",
                                     "relaunch.event.>.x", "relaunch. event.>", ">"])
def test_event_stream_refuses_filters_outside_the_events_stream(api, subject):
    resp = api.get("/v1/events/stream", params={"subject": subject})
    assert resp.status_code == 400 and "relaunch.event.>" in resp.json()["detail"]


def test_event_stream_without_nats_is_a_503_that_says_the_ledger_still_works(api, fakes):
    fakes.events.connected = False
    resp = api.get("/v1/events/stream")
    assert resp.status_code == 503
    assert "NATS" in resp.json()["detail"] and "ledger endpoints work" in resp.json()["detail"]


def test_event_streams_are_capped(fakes):
    with client(fakes, event_streams_max=0) as api:
        resp = api.get("/v1/events/stream")
    assert resp.status_code == 503 and "RELAUNCH_API_EVENT_STREAMS_MAX" in resp.json()["detail"]


# ---- the dashboard --------------------------------------------------------------------------

def test_dashboard_is_served_with_a_policy_that_forbids_outside_content(api):
    page = api.get("/")
    assert page.status_code == 200 and "<title>relaunch</title>" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/dashboard.js", "/static/dashboard.css"):
        text = api.get(asset).text
        assert "http://" not in text and "https://" not in text  # nothing loaded from elsewhere
    js = api.get("/static/dashboard.js").text
    assert "innerHTML" not in js and "eval(" not in js  # ledger text never becomes markup or code


def test_each_job_says_its_outcome_in_words(api, fakes):
    # The reader gives each attempt's first anomaly (ledger_read._FAILURES); the route makes the sentence.
    fakes.ledger.rows[0]["failures"] = [{"attempt": 0, "kind": "crash", "category": "gpu_fell_off_bus",
                                         "summary": "", "evidence": []}]
    jobs = {j["job_id"]: j for j in api.get("/v1/jobs").json()["jobs"]}
    assert jobs["101"]["outcome"] == "recovered after GPU fell off bus, 1 restart; running"
    assert jobs["102"]["outcome"] == "completed"  # COMPLETED, verdict watching: not "watching"
    assert "failures" not in jobs["101"]
    body = api.get("/v1/jobs/local/101").json()
    assert body["job"]["outcome"] == jobs["101"]["outcome"]  # the job page leads with the same sentence


def test_state_and_verdict_filters_take_any_case(api, fakes):
    body = api.get("/v1/jobs", params={"state": "running", "verdict": "Watching"}).json()
    assert [j["job_id"] for j in body["jobs"]] == ["101"]
    assert fakes.ledger.calls[-1][1]["states"] == ["RUNNING"] and fakes.ledger.calls[-1][1]["verdicts"] == ["watching"]


def test_slurms_none_reason_is_shown_as_no_reason(api, fakes):
    fakes.ledger.rows[0]["reason"] = "None"  # written by an actuator from before issue 40
    assert api.get("/v1/jobs").json()["jobs"][0]["reason"] == ""
