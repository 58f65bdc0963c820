"""A node's history across jobs decays with a half-life (relaunch.decider.domain.reputation)."""

from __future__ import annotations

import datetime as dt

import pytest

from relaunch.decider.domain.reputation import HALF_LIFE, HISTORY_WEIGHT, Exclusion, history_weight, horizon

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def test_an_exclusion_now_weighs_one_and_halves_every_half_life():
    assert history_weight([("7", NOW)], NOW) == (1.0, ("7",))
    assert history_weight([("7", NOW - HALF_LIFE)], NOW)[0] == 0.5
    assert history_weight([("7", NOW - 2 * HALF_LIFE)], NOW)[0] == 0.25


def test_each_job_counts_once_by_its_latest_exclusion_newest_first():
    entries = [Exclusion("7", NOW - HALF_LIFE, 1, True), Exclusion("7", NOW, 1, True),
               Exclusion("8", NOW - HALF_LIFE, 2, True)]
    assert history_weight(entries, NOW) == (1.5, ("7", "8"))


def test_two_exclusions_within_a_day_reach_the_threshold_and_a_week_later_they_do_not():
    two = [Exclusion("7", NOW - dt.timedelta(hours=20), 1), Exclusion("8", NOW, 2)]
    assert history_weight(two, NOW)[0] >= HISTORY_WEIGHT
    assert history_weight(two, NOW + dt.timedelta(days=7))[0] < 0.2


def test_beyond_the_horizon_nothing_counts_and_the_future_counts_as_now():
    assert history_weight([("7", NOW - horizon() - dt.timedelta(seconds=1))], NOW) == (0.0, ())
    assert history_weight([("7", NOW + dt.timedelta(minutes=5))], NOW) == (1.0, ("7",))


def test_a_half_life_must_be_positive():
    with pytest.raises(ValueError):
        history_weight([], NOW, dt.timedelta(0))
