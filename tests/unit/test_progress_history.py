"""A job's progress history stays bounded however long the job runs (relaunch.common.progress_history)."""

from __future__ import annotations

from relaunch.common import progress_history as ph


def test_a_week_of_reports_every_second_stays_within_the_bound_and_keeps_every_report():
    buckets, width = {}, ph.BASE_WIDTH_S
    week = 7 * 86400
    # every 60 s for a week, then a burst: 10,080 + 100 reports
    points = [(1e9 + t, t // 60, 100.0 + t % 7, 1.0) for t in range(0, week, 60)]
    buckets, width = ph.add(buckets, width, points)
    assert len(buckets) <= ph.MAX_BUCKETS and width >= week // ph.MAX_BUCKETS
    assert sum(b.n for b in buckets.values()) == len(points)
    ordered = sorted(buckets.values(), key=lambda b: b.start)
    assert ordered[-1].step_max == (week - 60) // 60 and ordered[0].step_min == 0
    assert all(b.start % width == 0 for b in ordered)


def test_buckets_average_throughput_and_step_time_and_skip_missing_values():
    buckets, width = ph.add({}, 2, [(100.0, 1, 10.0, None), (100.5, 2, 20.0, 0.5), (101.9, 3, None, 1.5)])
    (b,) = buckets.values()
    assert (b.start, b.n, b.step_min, b.step_max, b.throughput, b.step_time_s) == (100, 3, 1, 3, 15.0, 1.0)
    again = ph.decode(str(b.start), b.encode())
    assert again == b
    assert ph.read({"w": "2", str(b.start): b.encode()}) == ([b], 2)
