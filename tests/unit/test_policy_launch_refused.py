"""A successor Slurm killed at launch (its credential revoked) spends no attempt (domain/history.py, policy.py)."""

import datetime as dt
from dataclasses import replace

import pytest

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.history import AttemptRecord, RestartRecord
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


def crash_line(attempt: int) -> AnomalyDetected:
    return scheduler_failed(attempt).model_copy(update={
        "anomaly_id": f"c.1.{attempt}.log", "source": "log", "signature_id": "python_traceback",
        "category": "python_exception", "summary": "Traceback (most recent call last): ..."})


def test_an_attempt_that_shows_it_ran_is_never_a_free_refused_launch():
    # Issue 36: the actuator once took a script that failed in the second of its requeue for a refused launch.
    # Whatever it says, an attempt that logged an error or reported a step of its own ran, and spends one.
    said_refused = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1),),
                           launch_refused=frozenset({1}))
    d = decide(said_refused, crash_line(1), Policy(max_attempts=2), NOW)
    assert d.rule != "launch_refused" and d.rule == "max_attempts"
    stepped = History(decided_attempts=frozenset({0}), last_generation=1, restarts=(restart(0, 1),),
                      attempts=(AttemptRecord(0), AttemptRecord(1, high_step=40)), launch_refused=frozenset({1}))
    assert stepped.refused_launches() == frozenset() and stepped.attempts_used(1) == 2
    assert decide(stepped, scheduler_failed(1), Policy(max_attempts=2), NOW).rule == "max_attempts"


@pytest.mark.parametrize("max_attempts", [1, 2, 3])  # the default policy allows 2 unknown-class restarts
def test_free_retries_never_let_a_job_run_more_attempts_than_its_policy_allows(max_attempts):
    # Simulate a job whose every attempt fails at once, with Slurm refusing some launches in between: the
    # attempts that ran (not refused) never exceed max_attempts, however the refusals fall.
    for refused_pattern in range(1 << 6):
        refused = frozenset(a for a in range(1, 7) if refused_pattern >> (a - 1) & 1)
        history, ran, attempt = History(), 0, 0
        while attempt < 20:
            if attempt in refused:
                history = replace(history, launch_refused=history.launch_refused | {attempt})
            else:
                ran += 1
            d = decide(history, scheduler_failed(attempt), Policy(max_attempts=max_attempts, storm_restarts=0), NOW)
            if d.kind == "join":
                attempt += 1
                continue
            if d.kind != "restart":
                break
            history = replace(history, decided_attempts=history.decided_attempts | {attempt},
                              last_generation=d.generation,
                              restarts=history.restarts + (restart(attempt, d.generation),))
            attempt += 1
        assert ran == max_attempts, (sorted(refused), ran)
