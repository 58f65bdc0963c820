import json
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relaunch.detector.domain.progress import ProgressPoint
from relaunch.detector.domain.stragglers import (
    _median,
    StragglerPolicy, StragglerState, observe_point, observe_points, policy_with_options, rate_of, slow_rank,
    verdict, windows,
)

POLICY = StragglerPolicy()
T0 = 1_780_000_000.0


def point(step, throughput=None, step_time=None, rank=None, preset="megatron"):
    return ProgressPoint(step, throughput, step_time, rank, preset)


def feed(state, rates, first_step=1, t=T0):
    for i, rate in enumerate(rates):
        state = observe_point(state, point(first_step + i, throughput=rate), t + i)
    return state


def windows_to_detect(drop, offset, seed):
    """Windows completed from the start of a sustained drop until the first verdict."""
    rng = random.Random(seed)
    wp = POLICY.window_points
    state, step = StragglerState(), 0
    for _ in range(8 * wp + offset):  # healthy, jittered +-5%
        step += 1
        state = observe_point(state, point(step, throughput=100 * rng.uniform(0.95, 1.05)), T0 + step)
        assert verdict(state, POLICY) is None
    start_total = state.total
    for _ in range(10 * wp):
        step += 1
        state = observe_point(state, point(step, throughput=100 * (1 - drop) * rng.uniform(0.95, 1.05)), T0 + step)
        found = verdict(state, POLICY)
        if found is not None:
            return -(-(state.total - start_total) // wp), found
    return None, None


@pytest.mark.parametrize("offset", range(POLICY.window_points))
@pytest.mark.parametrize("seed", range(5))
def test_a_sustained_25_percent_drop_is_detected_within_3_windows(offset, seed):
    taken, found = windows_to_detect(0.25, offset, seed)
    assert taken is not None and taken <= 3
    assert 0.2 < found.drop < 0.3 and 95 <= found.baseline <= 105 and found.unit == "megatron:throughput"
    assert "below the baseline" in found.reason and found.rank is None


def test_jitter_of_5_percent_is_never_flagged_over_long_runs():
    for seed in range(20):
        rng = random.Random(seed)
        state = StragglerState()
        for step in range(1, 3001):
            state = observe_point(state, point(step, throughput=100 * rng.uniform(0.95, 1.05)), T0 + step)
            assert verdict(state, POLICY) is None, (seed, step)


def test_a_short_dip_is_not_sustained():
    state = feed(StragglerState(), [100.0] * 40)
    state = feed(state, [60.0] * POLICY.window_points, first_step=41)
    assert verdict(state, POLICY) is None
    state = feed(state, [100.0] * 20, first_step=41 + POLICY.window_points)
    assert verdict(state, POLICY) is None


def test_no_verdict_before_a_baseline_exists():
    state = feed(StragglerState(), [100.0] * 10 + [50.0] * 10)
    assert verdict(state, POLICY) is None


def test_the_suspect_windows_are_excluded_from_their_own_baseline():
    state = feed(StragglerState(), [100.0] * 30 + [70.0] * 10)
    found = verdict(state, POLICY)
    assert found.baseline == 100.0 and found.current == 70.0 and found.drop == pytest.approx(0.3)


def test_the_slow_rank_and_its_node_are_named():
    # Every rank prints the job's throughput and its own compute time per step; from step 31 rank 3 is
    # 40% slower and, as everyone waits for it at each collective, the job's throughput drops 30%.
    state = StragglerState()
    for step in range(1, 46):
        slow = step > 30
        batch = [point(step, throughput=1000.0 * (0.7 if slow else 1.0), rank=r, preset="torchtitan",
                       step_time=1.4 if slow and r == 3 else 1.0) for r in range(8)]
        state = observe_points(state, batch, T0 + step)
    found = verdict(state, POLICY, {3: "gpu-node-07", 4: "gpu-node-08"})
    assert found is not None and found.rank == 3 and found.node == "gpu-node-07"
    assert "rank 3 on gpu-node-07 takes 1.4 s per step against 1 s" in found.reason
    without_map = verdict(state, POLICY)
    assert without_map.rank == 3 and without_map.node is None


def test_a_lasting_drop_becomes_the_new_baseline_so_one_incident_is_reported_once():
    state = feed(StragglerState(), [100.0] * 30 + [70.0] * 60)
    assert verdict(state, POLICY) is None


def test_a_slow_rank_is_one_above_the_median_of_the_others_by_the_fraction():
    state = StragglerState()
    for i in range(5):
        state = observe_points(state, [point(i, step_time=t, rank=r) for r, t in enumerate([1.0, 1.02, 0.98, 1.19])],
                               T0 + i)
    assert slow_rank(state, POLICY) is None
    state = observe_points(state, [point(9, step_time=1.5, rank=3)] * 5, T0 + 9)
    assert slow_rank(state, POLICY)[0] == 3
    only_one = observe_points(StragglerState(), [point(1, step_time=9.0, rank=0)], T0)
    assert slow_rank(only_one, POLICY) is None


def test_duplicate_steps_from_many_ranks_count_once_and_old_steps_not_at_all():
    state = StragglerState()
    state = observe_points(state, [point(10, throughput=100.0, rank=r) for r in range(64)], T0)
    assert state.total == 1 and len(state.rank_times) == 64
    state = observe_point(state, point(9, throughput=5.0), T0 + 1)  # a lagging rank, or an eval bar
    assert state.total == 1


def test_a_step_going_backwards_after_a_restart_feeds_again_once_past_the_old_high():
    state = feed(StragglerState(), [100.0] * 50)
    state = feed(state, [100.0] * 20, first_step=31)  # resumed from a checkpoint at step 30
    assert state.total == 50 + 0
    state = feed(state, [100.0] * 10, first_step=51)
    assert state.total == 60


def test_missing_throughput_falls_back_to_step_time_and_otherwise_is_skipped():
    assert rate_of(point(1, step_time=0.5)) == (2.0, "megatron:step_time")
    assert rate_of(point(1, throughput=180.0, step_time=0.5)) == (180.0, "megatron:throughput")
    for bad in (point(1), point(1, throughput=0.0), point(1, step_time=float("nan"))):
        assert rate_of(bad) is None
    state = observe_point(StragglerState(), point(1), T0)
    assert state == StragglerState()


def test_a_second_unit_never_mixes_with_the_first():
    state = feed(StragglerState(), [180.0] * 40)  # megatron TFLOP/s
    for i in range(20):  # DeepSpeed's samples/s lines in the same log
        state = observe_point(state, point(41 + i, throughput=20.0, preset="deepspeed"), T0 + 41 + i)
    assert state.total == 40 and verdict(state, POLICY) is None


def test_windows_are_aligned_on_all_samples_ever_taken():
    state = feed(StragglerState(), [float(i) for i in range(1, 400)])
    got = windows(state, POLICY)
    assert len(got) == 256 // 5 or len(got) == 256 // 5 - 1
    assert got[-1][0] == 393.0  # median of 391..395; 396..399 are an incomplete window


def test_state_round_trips_through_json():
    state = observe_points(feed(StragglerState(), [100.0] * 12), [point(20, step_time=1.0, rank=3)], T0)
    again = StragglerState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state
    with pytest.raises(ValueError):
        StragglerState.from_dict({"v": 1, "unit": None})


def test_per_job_overrides_and_validation():
    policy = policy_with_options(POLICY, {"straggler_threshold": 10, "max_attempts": 3})
    assert policy.fraction == pytest.approx(0.1) and policy.sustain_windows == POLICY.sustain_windows
    assert policy_with_options(POLICY, {}) is POLICY
    assert policy_with_options(POLICY, {"straggler_threshold": 0}) is POLICY  # 0: the detector's setting
    for bad in ({"fraction": 0}, {"fraction": 1.5}, {"window_points": 0}, {"min_baseline_windows": 9},
                {"window_points": 100}, {"rank_points": 99}):
        with pytest.raises(ValueError):
            StragglerPolicy(**bad)


@pytest.mark.parametrize("seed", range(40))
def test_keeping_only_the_samples_a_verdict_reads_changes_no_verdict(seed):
    """The detector keeps StragglerPolicy.samples_kept samples, not MAX_SAMPLES (the state is rewritten
    on every report): every verdict along a random run, drops and jitter included, is the same."""
    from relaunch.detector.domain.stragglers import MAX_SAMPLES, StragglerPolicy, observe_points, verdict

    rng = random.Random(seed)
    policy = StragglerPolicy(sustain_windows=rng.choice([1, 2, 3]), window_points=rng.choice([3, 5, 8]))
    full, trimmed = StragglerState(), StragglerState()
    rate, t = 100.0, 0.0
    for step in range(1, 400):
        if rng.random() < 0.02:
            rate *= rng.choice([0.5, 0.7, 1.0, 1.3])
        t += 1.0
        points = [point(step, throughput=rate * rng.uniform(0.95, 1.05))]
        full = observe_points(full, points, t, keep=MAX_SAMPLES)
        trimmed = observe_points(trimmed, points, t, keep=policy.samples_kept)
        assert len(trimmed.samples) <= policy.samples_kept
        assert verdict(trimmed, policy) == verdict(full, policy), step


@given(st.lists(st.floats(0.001, 1e9, allow_nan=False), min_size=1, max_size=30))
def test_the_window_median_is_statistics_median(values):
    assert _median(values) == statistics.median(values)


def test_a_version_1_state_from_an_older_release_reads_as_the_same_state():
    state = feed(StragglerState(), [100.0] * 12 + [60.0] * 3)
    v1 = {"v": 1, "unit": state.unit, "high_step": state.high_step, "total": state.total, "rank_times": {},
          "samples": [[r, t] for r, t in state.samples]}
    assert StragglerState.from_dict(json.loads(json.dumps(v1))) == state
    assert StragglerState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    with pytest.raises(ValueError):
        StragglerState.from_dict({**state.to_dict(), "times": []})
