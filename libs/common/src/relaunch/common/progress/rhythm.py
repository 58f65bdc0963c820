"""The hang timeout a job's own rhythm gives (docs/user-guide.md, "Hangs"): the calibration rule the
detector's hang watch applies (relaunch.detector.domain.hangs) and `relaunch progress` reports. Pure."""

from __future__ import annotations

import math

FLOOR_S = 600.0
"""The detector's default hang floor (its hang_floor_s: minutes, docs/operator-guide.md)."""
MULTIPLIER = 5.0
PERCENTILE = 95.0
MIN_INTERVALS = 3
WARMUP_S = 1800.0


def percentile(values: tuple[float, ...] | list[float], pct: float) -> float:
    """Nearest-rank percentile: always one of the values, so a single outlier is never interpolated in."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100.0 * len(ordered)) - 1)]


def calibrated_timeout_s(intervals: tuple[float, ...] | list[float], floor_s: float = FLOOR_S,
                         multiplier: float = MULTIPLIER, pct: float = PERCENTILE,
                         min_intervals: int = MIN_INTERVALS) -> tuple[float, str] | None:
    """`max(floor, multiplier x p<pct> of the intervals)` and why; None before `min_intervals` are known
    (the warm-up allowance applies then)."""
    if len(intervals) < min_intervals:
        return None
    pace = percentile(intervals, pct)
    scaled = multiplier * pace
    why = f"{multiplier:g} x p{pct:g} {pace:.3g} s of the last {len(intervals)} step intervals = {scaled:.3g} s"
    if scaled >= floor_s:
        return scaled, why
    return floor_s, f"floor {floor_s:g} s (above {why})"
