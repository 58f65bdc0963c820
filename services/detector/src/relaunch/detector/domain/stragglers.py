"""Straggler detection: throughput below the job's own recent baseline for a sustained window.

Pure: the state is a frozen value that each observation replaces; time is passed in (seconds since
the epoch as a float, or an aware datetime) and only ever used in reason texts.

How, and why:
- Samples are a job's rates: the printed throughput, or 1 / step time where only that is printed.
  The first sample fixes the job's unit (preset and which of the two it is); samples in another
  unit are ignored, because TFLOP/s and samples/s must never be compared (Megatron-DeepSpeed prints
  both, on different lines).
- Consecutive samples are grouped into windows of `window_points`; a window's value is its median,
  so one slow logging interval cannot make a window slow, and jitter of a few percent never can.
- The last `sustain_windows` complete windows are the suspects. The baseline is the median of the
  up to `baseline_windows` windows before them: it excludes the suspects, so a drop cannot drag its
  own baseline down, yet it follows the job's own pace (no absolute number to configure). A lasting
  drop that nobody acts on becomes the new baseline after a few windows: one incident, not a stream.
- Per-rank step times, when reported, name the slow rank: the one whose recent median step time
  exceeds the median of the other ranks' by the fraction; the caller's rank -> node map names its node.
  (In data-parallel training every rank waits for the slowest at each collective, so the per-rank
  time worth reporting is the compute time before the collective: see relaunch.client.)

Invariants: only steps above the highest seen feed the job's rate, so many ranks printing the same
step count once, and evaluation bars or lagging ranks cannot pollute it. Start a fresh state for each
attempt of a job. The state is bounded (MAX_SAMPLES job samples, MAX_RANK_POINTS per rank).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from .clock import seconds, when
from .progress import ProgressPoint

STATE_VERSION = 2
MAX_SAMPLES = 256
MAX_RANK_POINTS = 16


@dataclass(frozen=True)
class StragglerPolicy:
    fraction: float = 0.2
    """A window is slow when its rate is below baseline x (1 - fraction); a rank is slow when its step
    time is above the other ranks' median x (1 + fraction)."""
    window_points: int = 5
    """Samples (progress lines with a rate) per window."""
    sustain_windows: int = 2
    """Consecutive slow windows needed: a 25% drop is then reported 2 windows after it begins when it
    begins on a window boundary, 3 at most otherwise."""
    baseline_windows: int = 6
    """Windows before the suspect ones whose median is the baseline."""
    min_baseline_windows: int = 3
    """No verdict until this many baseline windows exist (start-up pace is not a baseline)."""
    rank_points: int = 5
    """Recent step times per rank whose median is that rank's pace."""

    @property
    def samples_kept(self) -> int:
        """Samples a verdict can read: its baseline and sustain windows, plus one partial window (windows
        are aligned on the total taken, so dropping older samples never shifts them)."""
        return (self.baseline_windows + self.sustain_windows + 1) * self.window_points

    def __post_init__(self) -> None:
        if not 0 < self.fraction < 1:
            raise ValueError(f"straggler fraction must be in (0, 1), not {self.fraction!r}")
        if min(self.window_points, self.sustain_windows, self.min_baseline_windows, self.rank_points) < 1:
            raise ValueError("straggler policy counts must be at least 1")
        if self.min_baseline_windows > self.baseline_windows:
            raise ValueError("straggler policy needs min_baseline_windows <= baseline_windows")
        if (self.baseline_windows + self.sustain_windows) * self.window_points > MAX_SAMPLES:
            raise ValueError(f"straggler policy needs (baseline + sustain windows) x window_points <= {MAX_SAMPLES}")
        if self.rank_points > MAX_RANK_POINTS:
            raise ValueError(f"straggler policy needs rank_points <= {MAX_RANK_POINTS}")


OPTION_FIELDS = {"straggler_threshold": "fraction"}
"""Job-comment options (docs/policy.md, "The job comment") -> StragglerPolicy fields; the threshold is
given in percent (options are integers)."""


def policy_with_options(base: StragglerPolicy, options: Mapping[str, float]) -> StragglerPolicy:
    """`base` with the job's overrides applied; keys outside OPTION_FIELDS are left to other readers."""
    changes = {OPTION_FIELDS[key]: float(value) / 100.0 for key, value in options.items()
               if key in OPTION_FIELDS and value}  # 0: the detector's own setting
    return replace(base, **changes) if changes else base


@dataclass(frozen=True)
class StragglerState:
    unit: str | None = None
    """`<preset>:throughput` or `<preset>:step_time`, fixed by the first sample."""
    high_step: int | None = None
    rates: tuple[float, ...] = ()
    """The samples' rates, oldest first, the last MAX_SAMPLES of them."""
    times: tuple[float, ...] = ()
    """When each of `rates` was seen (two flat tuples rather than pairs: the state is decoded and
    encoded for every report)."""
    total: int = 0
    """Samples ever taken: windows are aligned on it, so trimming old samples never shifts them."""
    rank_times: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    """Recent step times per rank. Never mutated: every change builds a new dict."""

    @property
    def samples(self) -> tuple[tuple[float, float], ...]:
        """(rate, seen_at) pairs, oldest first."""
        return tuple(zip(self.rates, self.times))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able (tuples are arrays to json and orjson; not copied into lists: states are written for every report)."""
        return {"v": STATE_VERSION, "unit": self.unit, "high_step": self.high_step, "rates": self.rates,
                "times": self.times, "total": self.total,
                "rank_times": {str(rank): list(times) for rank, times in self.rank_times.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StragglerState:
        """Version 2, or version 1 (samples as [rate, seen_at] pairs) from an older release."""
        if data.get("v") not in (1, STATE_VERSION):
            raise ValueError(f"straggler state version {data.get('v')!r} is not {STATE_VERSION}")
        try:
            if data["v"] == 1:
                pairs = [(float(r), float(t)) for r, t in data["samples"]]
                rates, times = tuple(r for r, _ in pairs), tuple(t for _, t in pairs)
            else:
                rates, times = tuple(float(r) for r in data["rates"]), tuple(float(t) for t in data["times"])
                if len(rates) != len(times):
                    raise ValueError(f"{len(rates)} rates but {len(times)} times")
            return cls(unit=data["unit"], high_step=None if data["high_step"] is None else int(data["high_step"]),
                       rates=rates, times=times, total=int(data["total"]),
                       rank_times={int(k): tuple(float(x) for x in v) for k, v in data["rank_times"].items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"straggler state is malformed: {exc}") from exc

    @classmethod
    def from_own_dict(cls, data: Mapping[str, Any]) -> StragglerState:
        """from_dict for what to_dict of this very process made (no checks: it runs for every report)."""
        return cls(unit=data["unit"], high_step=data["high_step"], rates=tuple(data["rates"]),
                   times=tuple(data["times"]), total=data["total"],
                   rank_times={int(k): tuple(v) for k, v in data["rank_times"].items()} if data["rank_times"] else {})


@dataclass(frozen=True)
class Straggler:
    baseline: float
    current: float
    """The fastest of the suspect windows' rates (in the job's unit): the job stayed at or below it."""
    drop: float
    """1 - current / baseline."""
    since: float
    """When the first suspect window began."""
    windows: int
    unit: str
    rank: int | None
    node: str | None
    reason: str


def rate_of(point: ProgressPoint) -> tuple[float, str] | None:
    """The point's rate (higher is faster) and its unit, or None when it carries neither measure."""
    if point.throughput is not None and math.isfinite(point.throughput) and point.throughput > 0:
        return point.throughput, f"{point.preset}:throughput"
    if point.step_time_s is not None and math.isfinite(point.step_time_s) and point.step_time_s > 0:
        return 1.0 / point.step_time_s, f"{point.preset}:step_time"
    return None


def observe_point(state: StragglerState, point: ProgressPoint, now: float | dt.datetime) -> StragglerState:
    return observe_points(state, (point,), now)


def observe_points(state: StragglerState, points: Iterable[ProgressPoint], now: float | dt.datetime,
                   keep: int = MAX_SAMPLES) -> StragglerState:
    """Points read together (one log batch) at `now`; per-rank times are copied once per batch. Only the
    newest `keep` samples are kept (StragglerPolicy.samples_kept: what a verdict can read; the state is
    read and rewritten on every report, so its size is the detector's ingest cost)."""
    now = seconds(now)
    unit, high, total = state.unit, state.high_step, state.total
    rates, times = list(state.rates), list(state.times)
    ranks: dict[int, tuple[float, ...]] | None = None
    for point in points:
        measured = rate_of(point)
        if measured is None:
            continue
        rate, point_unit = measured
        if unit is None:
            unit = point_unit
        elif point_unit != unit:
            continue
        if point.rank is not None:
            # the rank's own step time where it prints a usable one (its throughput may be the job's, the
            # same on every rank), else the inverse of its throughput (an infinite one would be stored as
            # null, and the whole state read back as malformed)
            own = point.step_time_s if point.step_time_s is not None and 0 < point.step_time_s < math.inf \
                else 1.0 / rate
            ranks = dict(state.rank_times) if ranks is None else ranks
            ranks[point.rank] = (ranks.get(point.rank, ()) + (own,))[-MAX_RANK_POINTS:]
        if point.step is not None:
            if high is not None and point.step <= high:
                continue  # another rank's copy of a step already counted, or a counter that went back
            high = point.step
        rates.append(six_digits(rate))
        times.append(now)
        total += 1
    if total == state.total and ranks is None:
        return state if unit == state.unit else replace(state, unit=unit)
    keep = max(1, min(keep, MAX_SAMPLES))
    return StragglerState(unit=unit, high_step=high, rates=tuple(rates[-keep:]), times=tuple(times[-keep:]),
                          total=total, rank_times=state.rank_times if ranks is None else ranks)


def six_digits(rate: float) -> float:
    """The rate to six significant digits: verdicts compare rates 20% apart, and the state, stored for
    every report, is a third shorter without the 17-digit floats."""
    return round(rate, 5 - math.floor(math.log10(rate)))


def windows(state: StragglerState, policy: StragglerPolicy, last: int | None = None) -> list[tuple[float, float]]:
    """The complete windows still held (or only the `last` of them), oldest first, as (median rate,
    started_at)."""
    # index in `samples` just past the last complete window: the newest samples may be a partial one
    end = len(state.rates) - state.total % policy.window_points
    result: list[tuple[float, float]] = []
    while end - policy.window_points >= 0 and (last is None or len(result) < last):
        start = end - policy.window_points
        result.append((_median(list(state.rates[start:end])), state.times[start]))
        end = start
    result.reverse()
    return result


def _median(values: list[float]) -> float:
    """statistics.median for a list of floats, without its generality (a verdict takes eight of them
    every window of every job)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def slow_rank(state: StragglerState, policy: StragglerPolicy) -> tuple[int, float, float] | None:
    """(rank, its median step time, the other ranks' median) for the slowest rank when it is slow."""
    paces = {rank: statistics.median(times[-policy.rank_points:]) for rank, times in state.rank_times.items()
             if times}
    if len(paces) < 2:
        return None
    rank = max(paces, key=lambda r: (paces[r], -r))
    others = statistics.median(t for r, t in paces.items() if r != rank)
    if paces[rank] > others * (1.0 + policy.fraction):
        return rank, paces[rank], others
    return None


def verdict(state: StragglerState, policy: StragglerPolicy, rank_nodes: Mapping[int, str] | None = None
            ) -> Straggler | None:
    done = windows(state, policy, last=policy.baseline_windows + policy.sustain_windows)
    suspects = done[-policy.sustain_windows:]
    before = done[:-policy.sustain_windows][-policy.baseline_windows:]
    if len(suspects) < policy.sustain_windows or len(before) < policy.min_baseline_windows:
        return None
    baseline = statistics.median(rate for rate, _ in before)
    threshold = baseline * (1.0 - policy.fraction)
    if any(rate >= threshold for rate, _ in suspects):
        return None
    current = max(rate for rate, _ in suspects)  # the level the job stayed at or below: the sustained drop
    drop = 1.0 - current / baseline
    slow = slow_rank(state, policy)
    rank = slow[0] if slow else None
    node = (rank_nodes or {}).get(rank) if rank is not None else None
    unit = state.unit or "?"
    reason = (f"{unit} rate at most {current:.4g} in each of the last {len(suspects)} windows of "
              f"{policy.window_points} samples (since {when(suspects[0][1])}) is {drop:.0%} below the baseline "
              f"{baseline:.4g} (median of the {len(before)} windows before); threshold {policy.fraction:.0%}")
    if slow:
        reason += (f"; rank {rank}{f' on {node}' if node else ''} takes {slow[1]:.3g} s per step against "
                   f"{slow[2]:.3g} s for the other ranks")
    return Straggler(baseline, current, drop, suspects[0][1], len(suspects), unit, rank, node, reason)
