import datetime as dt
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaunch.detector.domain.hangs import (
    HangPolicy, HangState, _deadline, deadline, new_state, observe_checkpoint, observe_progress, percentile,
    policy_with_options, timeout_s, verdict,
)

POLICY = HangPolicy(floor_s=10.0)  # the test stacks' floor (the default is minutes: test_the_default_floor_is_minutes)
T0 = 1_780_000_000.0  # seconds since the epoch (2026)


def run_steps(state, first_step, count, every, start):
    t = start
    for i in range(count):
        t = start + i * every
        state = observe_progress(state, first_step + i, t)
    return state, t


def first_flag(state, policy, start, step=0.5, horizon=100_000.0):
    """The first sweep time (every `step` s) at which the job is declared hung, or None."""
    t = start
    while t <= start + horizon:
        if verdict(state, policy, t) is not None:
            return t
        t += step
    return None


def test_with_one_second_steps_a_hang_is_declared_within_15_s_of_the_last_step():
    state, last = run_steps(new_state(T0), 1, 60, 1.0, T0 + 30)
    flagged = first_flag(state, POLICY, last)
    assert flagged is not None and flagged - last <= 15
    hang = verdict(state, POLICY, flagged)
    assert hang.last_step == 60 and hang.last_progress_at == last and not hang.during_save
    assert "step 60" in hang.reason and "floor 10 s" in hang.reason and "p95" in hang.reason


def test_jittery_fast_steps_are_not_flagged_between_steps():
    rng = random.Random(3)
    state, t = new_state(T0), T0 + 30
    for step in range(1, 3000):
        gap = rng.uniform(0.8, 1.2) if rng.random() > 0.02 else rng.uniform(2, 6)  # rare stalls
        assert verdict(state, POLICY, t + gap - 1e-6) is None or step <= 1
        t += gap
        state = observe_progress(state, step, t)


def test_a_60_s_checkpoint_save_with_start_and_end_lines_is_never_flagged():
    state, t = run_steps(new_state(T0), 1, 100, 1.0, T0 + 30)
    state = observe_checkpoint(state, "started", t + 0.5)
    for second in range(1, 61):
        assert verdict(state, POLICY, t + 0.5 + second) is None
    state = observe_checkpoint(state, "finished", t + 60.5)
    assert verdict(state, POLICY, t + 61.5) is None
    state = observe_progress(state, 101, t + 62)
    assert verdict(state, POLICY, t + 63) is None
    assert state.longest_save_s == pytest.approx(60)
    assert max(state.intervals) < 2, "the gap spanning the save must not be learnt as a step interval"


def test_a_save_without_an_end_line_ends_at_the_next_step():
    state, t = run_steps(new_state(T0), 1, 50, 1.0, T0)
    state = observe_checkpoint(state, "started", t + 1)  # HF Trainer prints no end line
    state = observe_progress(state, 51, t + 80)
    assert state.save_started_at is None and state.longest_save_s == pytest.approx(79)
    assert verdict(state, POLICY, t + 85) is None
    assert verdict(state, POLICY, t + 95) is not None


def test_a_lagging_ranks_older_step_does_not_end_a_save():
    state, t = run_steps(new_state(T0), 1, 50, 1.0, T0)
    state = observe_checkpoint(state, "started", t + 0.5)
    state = observe_progress(state, 49, t + 1)
    assert state.save_started_at == t + 0.5
    assert verdict(state, POLICY, t + 60) is None


def test_a_save_that_never_ends_is_a_hang_after_its_own_allowance():
    state, t = run_steps(new_state(T0), 1, 50, 1.0, T0)
    state = observe_checkpoint(state, "started", t + 1)
    assert verdict(state, POLICY, t + 1 + POLICY.checkpoint_s - 1) is None
    hang = verdict(state, POLICY, t + 1 + POLICY.checkpoint_s)
    assert hang.during_save and "checkpoint save" in hang.reason and "900 s" in hang.reason


def test_the_save_allowance_grows_with_the_longest_save_seen():
    state, t = run_steps(new_state(T0), 1, 10, 1.0, T0)
    state = observe_checkpoint(state, "started", t)
    state = observe_checkpoint(state, "finished", t + 500)
    state, t = run_steps(state, 11, 10, 1.0, t + 501)
    state = observe_checkpoint(state, "started", t)
    assert deadline(state, POLICY) == pytest.approx(t + 1500)
    assert "longest pause" in verdict(state, POLICY, t + 1500).reason


def test_duplicate_save_announcements_from_many_ranks_keep_the_first():
    state, t = run_steps(new_state(T0), 1, 10, 1.0, T0)
    state = observe_checkpoint(state, "started", t)
    assert observe_checkpoint(state, "started", t + 5) is state


def test_genuinely_slow_40_s_steps_are_not_flagged_early():
    state, last = run_steps(new_state(T0), 1, 20, 40.0, T0 + 600)
    assert timeout_s(state, POLICY)[0] == pytest.approx(200)
    for waited in range(0, 200, 5):
        assert verdict(state, POLICY, last + waited) is None
    assert verdict(state, POLICY, last + 200) is not None


def test_warm_up_allowance_before_the_first_step_and_until_calibrated():
    state = new_state(T0)
    assert deadline(state, POLICY) == T0 + POLICY.warmup_s
    hang = verdict(state, POLICY, T0 + POLICY.warmup_s)
    assert hang.last_step is None and "no training step seen" in hang.reason and "warm-up" in hang.reason
    state = observe_progress(state, 1, T0 + 900)  # a slow start-up is fine
    state = observe_progress(state, 2, T0 + 901)
    assert verdict(state, POLICY, T0 + 901 + 600) is None, "one interval is not a calibration"
    state = observe_progress(state, 3, T0 + 902)
    state = observe_progress(state, 4, T0 + 903)
    assert deadline(state, POLICY) == pytest.approx(T0 + 903 + POLICY.floor_s)


def test_duplicate_steps_from_many_ranks_are_not_progress():
    state, last = run_steps(new_state(T0), 1, 30, 1.0, T0)
    for rank_delay in range(1, 8):
        assert observe_progress(state, 30, last + rank_delay) is state
    assert verdict(state, POLICY, last + 12) is not None


def test_a_step_going_backwards_after_a_restart_is_life_but_teaches_no_interval():
    state, last = run_steps(new_state(T0), 1, 300, 1.0, T0)
    learnt = state.intervals
    state = observe_progress(state, 200, last + 5)  # resumed from the checkpoint at step 200
    assert state.last_step == 200 and state.high_step == 300 and state.intervals == learnt
    assert verdict(state, POLICY, last + 12) is None
    state, t = run_steps(state, 201, 150, 1.0, last + 6)
    assert state.high_step == 350 and max(state.intervals) <= 1.0 + 1e-9
    assert verdict(state, POLICY, t + 12).last_step == 350


def test_lagging_ranks_interleaving_old_steps_cannot_shrink_the_timeout():
    state, t = new_state(T0), T0
    for step in range(1, 200):
        t += 40.0
        state = observe_progress(state, step, t)
        state = observe_progress(state, step - 1, t + 0.01)  # a lagging rank's copy of the previous step
        state = observe_progress(state, step, t + 0.02)
    assert timeout_s(state, POLICY)[0] >= 5 * 39


def test_steps_read_in_one_batch_teach_no_zero_interval():
    state, t = new_state(T0), T0
    for batch in range(50):
        t += 2.0
        for k in range(20):  # 20 steps per 2 s read
            state = observe_progress(state, batch * 20 + k, t)
    assert min(state.intervals) == pytest.approx(2.0)


def test_progress_without_a_step_counts_as_progress():
    state, t = new_state(T0), T0
    for i in range(10):
        t += 30.0
        state = observe_progress(state, None, t)  # HF Trainer loss dicts
    assert len(state.intervals) == 9 and verdict(state, POLICY, t + 149) is None
    assert "the last progress line" in verdict(state, POLICY, t + 150).reason


def test_datetimes_are_accepted_and_the_reason_shows_wall_clock_time():
    start = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
    state = new_state(start)
    for i in range(10):
        state = observe_progress(state, i, start + dt.timedelta(seconds=i))
    hang = verdict(state, POLICY, start + dt.timedelta(seconds=30))
    assert "2026-11-29T12:00:09Z" in hang.reason
    with pytest.raises(ValueError, match="naive"):
        observe_progress(state, 11, dt.datetime(2026, 11, 29, 12, 1))


def test_state_round_trips_through_json():
    state, t = run_steps(new_state(T0), 1, 20, 1.0, T0)
    state = observe_checkpoint(state, "started", t + 1)
    again = HangState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state and deadline(again, POLICY) == deadline(state, POLICY)
    assert HangState.high_step_of(state.to_dict()) == state.high_step == 20
    assert HangState.high_step_of(new_state(T0).to_dict()) is None
    with pytest.raises(ValueError):
        HangState.from_dict({"v": 99})
    with pytest.raises(ValueError):
        HangState.from_dict({"v": 1, "watched_since": "x"})
    for bad in ({"v": 99, "high_step": 3}, {"v": 1}, {"v": 1, "high_step": "x"}):
        with pytest.raises(ValueError):
            HangState.high_step_of(bad)


def test_the_state_stays_bounded():
    state, _ = run_steps(new_state(T0), 1, 5000, 1.0, T0)
    assert len(state.intervals) <= 256


def test_per_job_overrides_and_validation():
    policy = policy_with_options(POLICY, {"hang_timeout": 120, "hang_multiplier": 3, "max_attempts": 5})
    assert policy.floor_s == 120 and policy.multiplier == 3 and policy.warmup_s == POLICY.warmup_s
    assert policy_with_options(POLICY, {"max_attempts": 5}) is POLICY
    for bad in ({"floor_s": 0}, {"multiplier": 0.5}, {"percentile": 0}, {"window": 0}, {"min_intervals": 500},
                {"warmup_s": float("nan")}):
        with pytest.raises(ValueError):
            HangPolicy(**bad)
    with pytest.raises(ValueError):
        observe_checkpoint(new_state(T0), "paused", T0)


def test_nearest_rank_percentile():
    assert percentile([1.0] * 95 + [30.0] * 5, 95) == 1.0
    assert percentile([1.0] * 94 + [30.0] * 6, 95) == 30.0
    assert percentile([7.0], 95) == 7.0


_EVENTS = st.lists(st.one_of(
    st.tuples(st.just("step"), st.one_of(st.none(), st.integers(0, 60)), st.floats(0.0, 120.0)),
    st.tuples(st.sampled_from(["started", "finished"]), st.none(), st.floats(0.0, 2000.0)),
), max_size=40)


@given(events=_EVENTS, floor=st.floats(1.0, 100.0), warmup=st.floats(1.0, 3600.0),
       checkpoint=st.floats(1.0, 1000.0), multiplier=st.floats(1.0, 10.0), min_intervals=st.integers(1, 5))
@settings(max_examples=300, deadline=None)
def test_deadline_is_the_time_verdict_declares_the_hang(events, floor, warmup, checkpoint, multiplier, min_intervals):
    """deadline() skips verdict's reason texts (it runs for every report); it must be the same number."""
    policy = HangPolicy(floor_s=floor, warmup_s=warmup, checkpoint_s=checkpoint, multiplier=multiplier,
                        min_intervals=min_intervals)
    state, t = new_state(T0), T0
    for kind, step, gap in events:
        t += gap
        state = observe_progress(state, step, t) if kind == "step" else observe_checkpoint(state, kind, t)
        due = deadline(state, policy)
        assert due == _deadline(state, policy)[0]
        assert verdict(state, policy, due) is not None
        assert verdict(state, policy, due - 1e-3 * max(1.0, abs(due) * 1e-9)) is None


def test_lines_read_in_one_batch_learn_the_pace_from_the_step_time_they_print():
    """A detector that starts again reads what the job printed meanwhile in one batch: every line shares
    one `now`, so no gap teaches an interval. Lines that print their own step time (Megatron, bars) teach
    it instead (times the steps each line advanced), so the hang timeout is calibrated at once, not the
    30-minute warm-up allowance."""
    at = T0 + 100
    state = new_state(T0)
    for step in range(10, 110, 10):  # logged every 10 steps, 2 s per step
        state = observe_progress(state, step, at, printed_s=2.0)
    assert state.intervals == (20.0,) * 9
    timeout, why = timeout_s(state, POLICY)
    assert timeout < 120 and "warm-up" not in why
    flagged = first_flag(state, POLICY, at)
    assert flagged is not None and flagged - at <= timeout + 1

    # Without a printed time the batch teaches nothing (as before): the warm-up allowance stands.
    plain = new_state(T0)
    for step in range(10, 110, 10):
        plain = observe_progress(plain, step, at)
    assert plain.intervals == () and timeout_s(plain, POLICY)[0] == POLICY.warmup_s
    # A printed time never replaces a real gap, and a NaN or zero one is ignored.
    real = observe_progress(observe_progress(new_state(T0), 1, T0 + 1, printed_s=9.0), 2, T0 + 3, printed_s=9.0)
    assert real.intervals == (2.0,)
    odd = observe_progress(observe_progress(new_state(T0), 1, at, printed_s=float("nan")), 2, at, printed_s=0.0)
    assert odd.intervals == ()
