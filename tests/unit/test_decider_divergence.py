"""decide() for jobs that still run (divergence, a crash seen while the attempt is RUNNING) and for
Megatron-LM's rerun exit codes (docs/policy.md, "Divergence" and the rule table)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from relaunch.common.optin import parse_comment
from relaunch.common.policies.policy_file import load_policies
from relaunch.common.policies.policy_set import resolve
from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.history import AttemptRecord, History
from relaunch.decider.domain.policy import Policy, decide

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
BIG = Policy(max_attempts=20, max_attempts_cap=20)


def diverged(attempt=0, **kw):
    return AnomalyDetected(anomaly_id=f"c.1.{attempt}.divergence", cluster="c", job_id="1", attempt=attempt,
                           kind="divergence", source="progress", signature_id="divergence_nonfinite",
                           category="divergence", fault_domain="application", action="stop",
                           summary="training diverged: the loss has been NaN in 3 consecutive progress reports",
                           detected_at=NOW, **kw)


def crash(category="python_application_error", domain="application", action="stop", **kw):
    return AnomalyDetected(anomaly_id="c.1.0.crash", cluster="c", job_id="1", attempt=0, kind="crash", source="log",
                           signature_id=category, category=category, fault_domain=domain, action=action,
                           summary="s", detected_at=NOW, **kw)


def test_a_diverged_run_is_cancelled_by_default_with_a_readable_reason():
    decision = decide(History(), diverged(), BIG, NOW)
    assert (decision.kind, decision.rule) == ("terminate", "divergence")
    assert "NaN" in decision.reason and "cancelled" in decision.reason and decision.generation == 1


def test_divergence_report_and_restart_are_the_jobs_choice():
    policies = load_policies()
    report = resolve(parse_comment("relaunch:divergence=report"), policies)
    restart = resolve(parse_comment("relaunch:divergence=restart"), policies)
    assert decide(History(), diverged(), report, NOW).kind == "report"
    decision = decide(History(), diverged(), restart, NOW)
    assert (decision.kind, decision.rule, decision.fault_class) == ("restart", "within_budget", "unknown")
    assert resolve(parse_comment("relaunch:divergence=maybe"), policies).observe_only


def test_a_restart_after_divergence_is_still_bounded():
    restart = replace(BIG, divergence="restart", max_attempts=2)
    assert decide(History(), diverged(attempt=1), restart, NOW).rule == "max_attempts"


def test_a_hang_and_a_divergence_are_cancelled_a_crash_is_left_to_end():
    running = History(attempts=(AttemptRecord(0, NOW, state="RUNNING"),))
    assert decide(running, crash(), BIG, NOW).kind == "stop"
    assert decide(running, diverged(), replace(BIG, terminate_hung=False), NOW).kind == "stop"


@pytest.mark.parametrize("code, kind, rule", [(17, "stop", "megatron_validation_failed"),
                                              (16, "restart", "within_budget")])
def test_megatron_rerun_exit_codes_are_honoured(code, kind, rule):
    ended = History(attempts=(AttemptRecord(0, NOW, state="FAILED", exit_code=code),))
    decision = decide(ended, crash(category="nan_loss"), BIG, NOW)
    assert (decision.kind, decision.rule) == (kind, rule)
    if code == 16:
        assert decision.fault_class == "hardware"
