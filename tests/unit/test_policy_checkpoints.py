"""Checkpoint-aware decisions (issue 40, item 3; docs/policy.md, rule no_checkpoint): a job that failed
twice without saving a checkpoint since its restart stops with that reason; a first attempt that fails before
any checkpoint restarts as before; a restart's Advice names the checkpoint step its successor should resume
from. And the option that sets it, per policy and per job."""

import datetime as dt
from dataclasses import replace

import pytest

from relaunch.common.goodput import Save
from relaunch.common.optin import parse_comment
from relaunch.common.policies.policy_set import parse_policies, resolve
from relaunch.common.policies.policy_file import load_policies
from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.history import AttemptRecord, History, RestartRecord
from relaunch.decider.domain.policy import Policy, decide

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
BIG = Policy(max_attempts=20, max_attempts_cap=20, storm_restarts=0)


def crash(attempt, kind="crash", domain="hardware", category="xid_79", last_step=None):
    return AnomalyDetected(anomaly_id=f"c.1.{attempt}.{kind}", cluster="c", job_id="1", attempt=attempt, kind=kind,
                           source="log", signature_id=category, category=category, fault_domain=domain,
                           action="restart", summary="s", detected_at=NOW, last_step=last_step)


def history(attempt, saves=(), steps=None):
    """Attempts 0..attempt-1 failed and were restarted (generations 1..attempt); `saves`: (attempt, step)."""
    steps = steps or {}
    return History(
        last_generation=attempt, attempts=tuple(AttemptRecord(i, NOW - (attempt - i + 1) * HOUR,
                                                              high_step=steps.get(i)) for i in range(attempt + 1)),
        restarts=tuple(RestartRecord(i, i + 1, "hardware", NOW - (attempt - i) * HOUR, status="CONVERGED")
                       for i in range(attempt)),
        saves=tuple(Save(a, s, NOW - (attempt - a + 1) * HOUR + dt.timedelta(minutes=s % 50)) for a, s in saves))


def test_a_first_attempt_failing_before_any_checkpoint_restarts_as_before():
    decision = decide(history(0), crash(0, last_step=40), BIG, NOW)
    assert (decision.kind, decision.rule, decision.resume_step) == ("restart", "within_budget", None)


def test_a_job_never_seen_saving_is_not_judged_by_its_saves():
    decision = decide(history(3), crash(3), BIG, NOW)  # four failures, no save line relaunch could read
    assert decision.kind == "restart"


def test_two_failures_without_a_save_since_the_restart_stop_the_job():
    past = history(2, saves=[(0, 1000)])
    first = decide(history(1, saves=[(0, 1000)]), crash(1), BIG, NOW)
    assert first.kind == "restart" and first.resume_step == 1000  # one failure without a save: restarted
    decision = decide(past, crash(2), BIG, NOW)
    assert (decision.kind, decision.rule) == ("stop", "no_checkpoint")
    assert "2 failed attempts in a row saved no checkpoint" in decision.reason
    assert "step 1000, saved by attempt 0" in decision.reason and "failures_without_checkpoint=2" in decision.reason


def test_a_save_in_the_failed_attempt_resets_the_count_and_is_where_the_successor_resumes():
    decision = decide(history(2, saves=[(0, 1000), (2, 1500)]), crash(2), BIG, NOW)
    assert (decision.kind, decision.rule, decision.resume_step) == ("restart", "within_budget", 1500)


def test_the_policy_sets_the_count_and_zero_turns_the_rule_off():
    past = history(2, saves=[(0, 1000)])
    assert decide(past, crash(2), replace(BIG, failures_without_checkpoint=3), NOW).kind == "restart"
    assert decide(history(3, saves=[(0, 1000)]), crash(3), replace(BIG, failures_without_checkpoint=3), NOW).rule \
        == "no_checkpoint"
    assert decide(history(4, saves=[(0, 1000)]), crash(4), replace(BIG, failures_without_checkpoint=0), NOW).kind \
        == "restart"
    assert decide(history(1, saves=[(0, 9)]), crash(1), replace(BIG, failures_without_checkpoint=1), NOW).rule \
        == "no_checkpoint"


def test_time_limits_and_preemptions_are_not_judged_by_their_saves():
    past = history(2, saves=[(0, 1000)])
    limit = crash(2, domain="scheduler", category="slurm_time_limit")
    assert decide(past, limit, BIG, NOW).kind == "restart"


def test_a_hung_job_without_saves_is_cancelled_with_the_reason():
    decision = decide(history(2, saves=[(0, 1000)]), crash(2, kind="hang", domain="unknown", category="hang"), BIG, NOW)
    assert (decision.kind, decision.rule) == ("terminate", "no_checkpoint")


def test_refused_launches_do_not_count_as_failures_without_a_save():
    past = replace(history(2, saves=[(0, 1000)]), launch_refused=frozenset({1}))
    assert decide(past, crash(2), BIG, NOW).kind == "restart"


def test_the_comment_may_tighten_the_count_never_loosen_it():
    policies = load_policies()
    assert resolve(parse_comment("relaunch"), policies).failures_without_checkpoint == 2
    tight = resolve(parse_comment("relaunch:checkpoint_failures=1"), policies)
    assert tight.failures_without_checkpoint == 1 and not tight.observe_only
    for loose in ("relaunch:checkpoint_failures=3", "relaunch:checkpoint_failures=0"):
        policy = resolve(parse_comment(loose), policies)
        assert policy.observe_only and "loosens policy 'default'" in policy.option_errors[0], loose
    off = parse_policies({"policy": {"p": {"failures_without_checkpoint": 0}}, "default_policy": "p"}, "t")
    assert resolve(parse_comment("relaunch:checkpoint_failures=4"), off).failures_without_checkpoint == 4
    assert resolve(parse_comment("relaunch"), off).as_dict()["failures_without_checkpoint"] == 0


@pytest.mark.parametrize("value", [-1, 1001, True, "2"])
def test_the_policy_file_refuses_a_bad_count(value):
    with pytest.raises(ValueError, match="failures_without_checkpoint"):
        parse_policies({"policy": {"p": {"failures_without_checkpoint": value}}, "default_policy": "p"}, "t")
