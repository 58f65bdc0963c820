import datetime as dt

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.policy import History, Policy, decide

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def anomaly(attempt=0, action="restart", **kw) -> AnomalyDetected:
    base = dict(anomaly_id=f"c.1.{attempt}.crash", cluster="c", job_id="1", attempt=attempt, kind="crash",
                source="log", signature_id="segfault", category="segfault", fault_domain="unknown", action=action,
                summary="s", detected_at=NOW)
    return AnomalyDetected(**{**base, **kw})


def test_restart_within_budget_gets_the_next_generation_and_an_expiry():
    d = decide(History(last_generation=0), anomaly(), Policy(max_attempts=2), NOW)
    assert d.kind == "restart" and d.generation == 1 and d.expires_at > NOW


def test_max_attempts_stops_and_names_the_rule():
    d = decide(History(), anomaly(attempt=1), Policy(max_attempts=2), NOW)
    assert d.kind == "stop" and d.rule == "max_attempts" and "max_attempts=2" in d.reason
    d = decide(History(), anomaly(attempt=0), Policy(max_attempts=1), NOW)
    assert d.kind == "stop" and "attempt 1 of 1" in d.reason


def test_one_decision_per_attempt():
    d = decide(History(decided_attempts=frozenset({0}), last_generation=1), anomaly(), Policy(), NOW)
    assert d.kind == "none"


def test_stop_action_and_observe_only_and_cancelled():
    assert decide(History(), anomaly(action="stop"), Policy(), NOW).rule == "fault_not_restartable"
    assert decide(History(), anomaly(), Policy(observe_only=True, option_errors=("bad",)), NOW).kind == "observe"
    assert decide(History(user_cancelled=True), anomaly(), Policy(), NOW).rule == "user_cancelled"


def test_restart_excluding_names_the_anomalys_nodes():
    d = decide(History(), anomaly(action="restart_excluding", nodes=["node2"]), Policy(), NOW)
    assert d.kind == "restart" and d.exclude_nodes == ("node2",)


def test_stragglers_are_reported_unless_the_job_opts_in():
    straggler = anomaly(kind="straggler", source="progress", signature_id="straggler_throughput",
                        category="straggler", action="restart_excluding", nodes=["node3"])
    assert decide(History(), straggler, Policy(), NOW).kind == "report"
    d = decide(History(), straggler, Policy(straggler=True), NOW)
    assert d.kind == "restart" and d.exclude_nodes == ("node3",)


def test_an_observed_job_records_what_act_mode_would_have_done():
    # docs/policy.md, "Errors": observe-only, relaunch records what it would do and touches nothing.
    observed = Policy(observe_only=True, option_errors=("unknown option 'colour'",))
    d = decide(History(), anomaly(action="restart_excluding", nodes=["node2"]), observed, NOW)
    assert d.kind == "observe" and d.exclude_nodes == () and d.expires_at is None  # nothing to carry out
    assert d.would is not None and d.would.kind == "restart" and d.would.exclude_nodes == ("node2",)
    assert "unknown option 'colour'" in d.reason and "would have restarted it without node2" in d.reason
    d = decide(History(), anomaly(attempt=2), observed, NOW)
    assert d.would.kind == "stop" and "would have stopped it (max_attempts)" in d.reason
