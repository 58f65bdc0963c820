"""A successor Slurm killed at launch (its credential revoked) spends no attempt (domain/history.py, policy.py)."""

import datetime as dt

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.history import RestartRecord
from relaunch.decider.domain.policy import History, Policy, decide

NOW = dt.datetime(2026, 12, 1, 7, 16, tzinfo=dt.UTC)


def scheduler_failed(attempt: int) -> AnomalyDetected:
    return AnomalyDetected(
        anomaly_id=f"c.1.{attempt}.crash", cluster="c", job_id="1", attempt=attempt, kind="crash", source="scheduler",
        signature_id="scheduler_failed", category="scheduler_failed", fault_domain="unknown", action="restart",
        summary="the job failed and no log line explains why: Slurm reports FAILED reason=NonZeroExitCode",
        exit_code=1, detected_at=NOW)


def restart(attempt: int, generation: int, status: str = "CONVERGED") -> RestartRecord:
    return RestartRecord(attempt=attempt, generation=generation, fault_class="unknown",
                         at=NOW - dt.timedelta(seconds=5), status=status, expires_at=NOW + dt.timedelta(minutes=30))


def test_a_refused_launch_joins_the_advice_that_began_it_and_spends_no_attempt():
    # max_attempts=2: attempt 0 crashed and was restarted (generation 1); Slurm refused attempt 1's launch.
    history = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1),),
                      launch_refused=frozenset({1}))
    d = decide(history, scheduler_failed(1), Policy(max_attempts=2), NOW)
    assert (d.kind, d.rule, d.generation) == ("join", "launch_refused", 1)
    assert "never ran" in d.reason and "spends no attempt" in d.reason
    # Without the actuator's word, the same failure would have stopped the job at max_attempts.
    plain = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1),))
    assert decide(plain, scheduler_failed(1), Policy(max_attempts=2), NOW).rule == "max_attempts"


def test_refused_launches_do_not_count_towards_max_attempts():
    # Attempts 1 and 2 were refused launches; attempt 3 is only the job's second attempt of its own.
    history = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1),),
                      launch_refused=frozenset({1, 2}))
    assert history.attempts_used(3) == 2
    d = decide(history, scheduler_failed(3), Policy(max_attempts=3), NOW)
    assert d.kind == "restart" and "attempt 3 of at most 3" in d.reason
    assert decide(history, scheduler_failed(3), Policy(max_attempts=2), NOW).rule == "max_attempts"


def test_the_decider_waits_for_the_actuators_word_while_the_advice_verifies_the_launch():
    open_advice = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1, "PENDING"),))
    assert open_advice.launch_verdict_pending(1, NOW) is not None
    assert open_advice.launch_verdict_pending(0, NOW) is None, "a first attempt has no launch to verify"
    converged = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1),))
    assert converged.launch_verdict_pending(1, NOW) is None
    refused = History(restarts=(restart(0, 1, "PENDING"),), launch_refused=frozenset({1}))
    assert refused.launch_verdict_pending(1, NOW) is None
