"""One attempt's progress state, held compactly and advanced in place: the hot path of progress ingest
(docs/architecture.md, "Scale").

hangs.HangState and stragglers.StragglerState are frozen values that each observation replaces; replacing
them for every report, and decoding and encoding them as JSON around each (about 190 numbers a job),
cost the detector 80-90 us of CPU per report. A ProgressTrack holds the same numbers (intervals, rates and
times in arrays of doubles: 8 bytes a number instead of a float object's 24 and its pointer's 8) and
advances them in place with exactly the rules of hangs.observe_progress, hangs.observe_checkpoint and
stragglers.observe_points (tests/unit/test_progress_track.py compares both over random sequences).

The verdicts stay pure functions of the frozen values: `hang_state()` and `straggler_state()` make
them, and hangs.deadline reads a track as it is (a track has every field deadline reads).

Stored (`encode`) as bytes: 'B', a header of counts, the arrays as little-endian doubles, then the
scalars as JSON (about 1.9 KB at full windows, and no text formatting of the 190 numbers).
`decode_record` turns either that or a JSON record (written before, and by the hang sweep, which
writes back what it read) into the one dict shape every reader takes (`record`).

Pure: no I/O. Not thread-safe and not shared: the tracker owns a track between its read and its save,
and a job's batches are applied one after another (tracking.ProgressTracker).
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from typing import Any, Iterable

import orjson

from relaunch.common.progress import divergence

from . import hangs, stragglers
from .clock import seconds
from .progress import CheckpointMark, OverflowMark, ProgressPoint

FORMAT = 2  # 2: the pause steps (hangs.HangState.pause_steps) follow the scalars; 1 (written before): none
_HEAD = struct.Struct("<BHH")  # format, number of step intervals, of straggler samples (rates and times alike)
_FRESH_DIVERGENCE = divergence.DivergenceState()
_STEADY = divergence.DivergenceState(calibrated=True, recent="." * divergence.DivergencePolicy().storm_window)
"""Most jobs' divergence state once they have run a while (the default policy's: calibrated, every recent
step went through, no loss figures): a track in it holds its last step alone, no state object."""
_STEADY_RECORD = _STEADY.to_dict()  # a steady track's stored form is this with its last step (`encode`)
_UNITS: dict[str, tuple[str, str]] = {}  # preset -> its samples' units (stragglers.rate_of's), made once
_CLIENT_UNITS = ("client:throughput", "client:step_time")
_SWAP = sys.byteorder != "little"  # stored doubles are little-endian whatever the machine (other replicas)


class ProgressTrack:
    __slots__ = ("attempt", "watched_since", "last_step", "high_step", "progress_at", "intervals",
                 "save_started_at", "save_ended_at", "longest_save_s", "gap_has_save", "pause_steps",
                 "top", "unit", "straggler_high", "rates", "times", "total", "rank_times", "_div", "_div_step",
                 "stored_as")

    def __init__(self, attempt: int, watched_since: float, hang_keep: int = 0, straggler_keep: int = 0) -> None:
        """A fresh attempt, watched since `watched_since` (hangs.new_state, stragglers.StragglerState());
        `hang_keep` and `straggler_keep`: the lengths its arrays will reach, reserved at once."""
        self.attempt = attempt
        # the hang state (hangs.HangState's fields and names: hangs.deadline reads them)
        self.watched_since = watched_since
        self.last_step: int | None = None
        self.high_step: int | None = None
        self.progress_at: float | None = None
        self.intervals = _reserved(hang_keep)
        self.save_started_at: float | None = None
        self.save_ended_at: float | None = None
        self.longest_save_s = 0.0
        self.gap_has_save = False
        self.pause_steps: tuple[int, ...] = ()
        self.top: float | None = None
        """The largest of `intervals`, None when not known (deadline finds it, _progress keeps it)."""
        # the straggler state (stragglers.StragglerState's fields, its high_step renamed)
        self.unit: str | None = None
        self.straggler_high: int | None = None
        self.rates = _reserved(straggler_keep)
        self.times = _reserved(straggler_keep)
        self.total = 0
        self.rank_times: dict[int, tuple[float, ...]] | None = None  # until a report names its rank (most never do)
        self._div: divergence.DivergenceState | None = _FRESH_DIVERGENCE
        """The divergence state; None while it is steady (_STEADY but for its last step, `_div_step`)."""
        self._div_step: int | None = None
        self.stored_as: str | None = None
        """The token of the write that stored it, where a cache holds it (adapters/statecache.py); not state."""

    # -- the divergence state (most jobs' is steady: only its last step changes, kept as a number) --------
    @property
    def divergence(self) -> divergence.DivergenceState:
        div = self._div
        return div if div is not None else divergence.with_last_step(_STEADY, self._div_step)

    @divergence.setter
    def divergence(self, state: divergence.DivergenceState) -> None:
        # (the two cheap tests first: most states that are not steady fail one of them)
        if state.calibrated and state.recent == _STEADY.recent and divergence.with_last_step(state, None) == _STEADY:
            self._div, self._div_step = None, state.last_step
        else:
            self._div = state

    def advance_divergence(self, step: int | None) -> divergence.DivergenceState | None:
        """divergence.observe_step(self.divergence, step), in place. Returns the state when it is not
        steady, None when it is (a steady state has no verdict: nothing non-finite, no collapse, no skip)."""
        if self._div is None:
            if step is not None:  # (observe_step of a steady state: the step is its last, back or forward)
                self._div_step = step
            return None
        self.divergence = divergence.observe_step(self._div, step)
        return self._div

    def carrying(self, before: ProgressTrack | None) -> ProgressTrack:
        """This fresh track with what an earlier attempt learnt of the job's pauses (rhythm, longest): the job's."""
        if before is not None and before.attempt < self.attempt:
            self.pause_steps, self.longest_save_s = before.pause_steps, before.longest_save_s
        return self

    # -- the frozen values the verdicts read ----------------------------------------------------
    @classmethod
    def from_states(cls, attempt: int, hang: hangs.HangState, strag: stragglers.StragglerState,
                    div: divergence.DivergenceState | None = None, hang_keep: int = 0,
                    straggler_keep: int = 0) -> ProgressTrack:
        track = cls(attempt, hang.watched_since, hang_keep, straggler_keep)
        track.last_step, track.high_step, track.progress_at = hang.last_step, hang.high_step, hang.progress_at
        track.intervals.extend(hang.intervals)
        track.save_started_at, track.save_ended_at = hang.save_started_at, hang.save_ended_at
        track.longest_save_s, track.gap_has_save, track.pause_steps = hang.longest_save_s, hang.gap_has_save, \
            hang.pause_steps
        track.unit, track.straggler_high, track.total = strag.unit, strag.high_step, strag.total
        track.rates.extend(strag.rates)
        track.times.extend(strag.times)
        track.rank_times = dict(strag.rank_times) if strag.rank_times else None
        track.divergence = div if div is not None else _FRESH_DIVERGENCE
        return track

    def hang_state(self) -> hangs.HangState:
        return hangs.HangState(watched_since=self.watched_since, last_step=self.last_step, high_step=self.high_step,
                               progress_at=self.progress_at, intervals=tuple(self.intervals),
                               save_started_at=self.save_started_at, save_ended_at=self.save_ended_at,
                               longest_save_s=self.longest_save_s, gap_has_save=self.gap_has_save,
                               pause_steps=self.pause_steps)

    def straggler_state(self) -> stragglers.StragglerState:
        return stragglers.StragglerState(unit=self.unit, high_step=self.straggler_high, rates=tuple(self.rates),
                                         times=tuple(self.times), total=self.total, rank_times=dict(self.rank_times or ()))

    # -- advancing (reference_track.advance's rules, in place) -----------------------------------------
    def observe(self, marks: Iterable, at: float, hang_keep: int = hangs.MAX_WINDOW,
                straggler_keep: int = stragglers.MAX_SAMPLES) -> None:
        """Marks seen together at `at` (rounded to the millisecond, as tracking stores every time)."""
        at = round(seconds(at), 3)
        points = []
        for mark in marks:
            if isinstance(mark, CheckpointMark):
                self._checkpoint(mark.phase, at)
            elif isinstance(mark, OverflowMark):
                self._progress(None, at, hang_keep, None)
            else:
                self._progress(mark.step, at, hang_keep, mark.step_time_s)
                if mark.total and mark.step is not None and mark.step >= mark.total:
                    self._checkpoint("started", at)  # the loop is over: see reference_track.advance
                if not self.pause_steps or not hangs.in_pause_shadow(self.pause_steps, mark.step):
                    points.append(mark)
        if points:
            self._samples(points, at, straggler_keep)

    def observe_point(self, point: ProgressPoint | OverflowMark, at: float, hang_keep: int = hangs.MAX_WINDOW,
                      straggler_keep: int = stragglers.MAX_SAMPLES) -> None:
        """observe((point,), at, ...) for one report (`at` in epoch seconds), without its list."""
        at = round(at, 3)
        if type(point) is OverflowMark:
            self._progress(None, at, hang_keep, None)
            return
        self._progress(point.step, at, hang_keep, point.step_time_s)
        if point.total and point.step is not None and point.step >= point.total:
            self._checkpoint("started", at)
        pauses = self.pause_steps
        if (not pauses or not hangs.in_pause_shadow(pauses, point.step)) and self._sample(point, at):
            self._trim_samples(straggler_keep)

    def observe_report(self, step: int | None, throughput: float | None, step_time_s: float | None,
                       rank: int | None, at: float, hang_keep: int = hangs.MAX_WINDOW,
                       straggler_keep: int = stragglers.MAX_SAMPLES) -> None:
        """observe_point for a relaunch.client report that is a progress point, from its fields (no point made)."""
        at = round(at, 3)
        self._progress(step, at, hang_keep, step_time_s)
        if (not self.pause_steps or not hangs.in_pause_shadow(self.pause_steps, step)) \
                and self._sample_of(step, throughput, step_time_s, rank, _CLIENT_UNITS, at):
            self._trim_samples(straggler_keep)

    def _progress(self, step: int | None, now: float, keep: int, printed_s: float | None) -> None:
        """hangs.observe_progress."""
        last = self.last_step
        if step is not None and step == last:
            return
        backwards = step is not None and last is not None and step < last
        high = self.high_step
        new_high = step is None or high is None or step > high
        progress_at = self.progress_at
        if not backwards and new_high and progress_at is not None and not self.gap_has_save:
            learnt = None
            if now > progress_at:
                learnt = round(now - progress_at, 6)
            elif printed_s is not None and 0 < printed_s < math.inf:
                steps = step - high if step is not None and high is not None else 1
                learnt = round(printed_s * max(1, steps), 6)
            if learnt is not None:
                intervals = self.intervals
                intervals.append(learnt)
                top = self.top
                if top is not None and learnt > top:
                    self.top = top = learnt
                over = len(intervals) - max(1, min(keep, hangs.MAX_WINDOW))
                if over > 0:
                    if top is not None and (intervals[0] if over == 1 else max(intervals[:over])) >= top:
                        self.top = None  # the largest leaves the window
                    del intervals[:over]
        if self.save_started_at is not None and not backwards:
            self.longest_save_s = max(self.longest_save_s, now - self.save_started_at)
            self.save_started_at, self.save_ended_at = None, now
            self.pause_steps = hangs.with_pause_step(self.pause_steps, high)
        if step is not None:
            self.high_step = step if high is None or step > high else high
            self.last_step = step
        self.progress_at = now
        self.gap_has_save = False

    def _checkpoint(self, phase: str, now: float) -> None:
        """hangs.observe_checkpoint."""
        if phase == "started":
            if self.save_started_at is None:
                self.save_started_at, self.gap_has_save = now, True
            return
        if phase != "finished":
            raise ValueError(f"checkpoint phase must be 'started' or 'finished', not {phase!r}")
        self.longest_save_s = max(self.longest_save_s, hangs.pause_length(self, now))
        self.pause_steps = hangs.with_pause_step(self.pause_steps, self.high_step)
        self.save_started_at, self.save_ended_at, self.gap_has_save = None, now, True

    def _samples(self, points: Iterable[ProgressPoint], now: float, keep: int) -> None:  # stragglers.observe_points
        if any([self._sample(point, now) for point in points]):  # (a list: every point is sampled)
            self._trim_samples(keep)

    def _trim_samples(self, keep: int) -> None:
        over = len(self.rates) - max(1, min(keep, stragglers.MAX_SAMPLES))
        if over > 0:
            del self.rates[:over]
            del self.times[:over]

    def _sample(self, point: ProgressPoint, now: float) -> bool:
        """One point of stragglers.observe_points; whether the state changed (the samples are then trimmed)."""
        units = _UNITS.get(point.preset)
        if units is None:
            units = _UNITS[point.preset] = (point.preset + ":throughput", point.preset + ":step_time")
        return self._sample_of(point.step, point.throughput, point.step_time_s, point.rank, units, now)

    def _sample_of(self, step: int | None, throughput: float | None, step_time: float | None, rank: int | None,
                   units: tuple[str, str], now: float) -> bool:
        """_sample from the point's fields (stragglers.rate_of inlined; `units`: the preset's throughput
        and step-time units)."""
        if throughput is not None and 0 < throughput < math.inf:  # (NaN fails both)
            rate, unit = throughput, units[0]
        else:
            if step_time is None or not 0 < step_time < math.inf:
                return False
            rate, unit = 1.0 / step_time, units[1]
        if self.unit is None:
            self.unit = unit
        elif unit != self.unit:
            return False
        changed = False
        if rank is not None:
            own = step_time if step_time is not None and 0 < step_time < math.inf else 1.0 / rate
            ranks = self.rank_times  # (straggler_state() and from_states copy it)
            if ranks is None:
                ranks = self.rank_times = {}
            ranks[rank] = (ranks.get(rank, ()) + (own,))[-stragglers.MAX_RANK_POINTS:]
            changed = True
        if step is not None:
            if self.straggler_high is not None and step <= self.straggler_high:
                return changed
            self.straggler_high = step
        self.rates.append(stragglers.six_digits(rate))
        self.times.append(now)
        self.total += 1
        return True

    def deadline(self, policy: hangs.HangPolicy) -> float:
        """hangs.deadline(self, policy), the same number, without going over the intervals when the
        floor applies (most reports of most jobs: the largest interval is kept)."""
        progress_at, intervals = self.progress_at, self.intervals
        if self.save_started_at is None and progress_at is not None and not self.pause_steps \
                and policy.min_intervals <= len(intervals) <= policy.window:
            top = self.top
            if top is None:
                top = self.top = max(intervals)
            if policy.multiplier * top <= policy.floor_s:
                anchor = progress_at if progress_at > self.watched_since else self.watched_since
                if self.save_ended_at is not None and self.save_ended_at > anchor:
                    anchor = self.save_ended_at
                return anchor + policy.floor_s
        return hangs.deadline(self, policy)

    def _divergence_record(self) -> dict[str, Any] | None:
        """The divergence state as stored: None when fresh (as a record written before divergence existed)."""
        if self._div is None:
            record = _STEADY_RECORD.copy()
            record["last_step"] = self._div_step
            return record
        return None if self._fresh_divergence() else self._div.to_dict()

    def _fresh_divergence(self) -> bool:
        div = self._div  # (a cheap test first: a job's divergence state has its last step once it reports)
        return div is not None and (div is _FRESH_DIVERGENCE or (div.last_step is None and div == _FRESH_DIVERGENCE))

    # -- stored form --------------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The record tracking stores as JSON (reference_track.record): {attempt, hang, straggler[, divergence]}."""
        out = {"attempt": self.attempt, "hang": self.hang_state().to_dict(), "straggler": self.straggler_state().to_dict()}
        div = self._divergence_record()
        if div is not None:
            out["divergence"] = div
        return out

    def encode(self) -> bytes:
        """The stored form (bytes; decode_record reads it)."""
        intervals, rates, times = self.intervals, self.rates, self.times
        if _SWAP:
            intervals, rates, times = (_swapped(a) for a in (intervals, rates, times))
        scalars = [self.attempt, self.watched_since, self.last_step, self.high_step, self.progress_at,
                   self.save_started_at, self.save_ended_at, self.longest_save_s, self.gap_has_save,
                   self.unit, self.straggler_high, self.total,
                   {str(rank): times for rank, times in self.rank_times.items()} if self.rank_times else None,
                   self._divergence_record(), self.pause_steps]
        body = b"".join((_HEAD.pack(FORMAT, len(intervals), len(rates)), intervals.tobytes(), rates.tobytes(),
                         times.tobytes(), orjson.dumps(scalars)))
        return b"B" + body


def decode_record(text: str | bytes) -> dict[str, Any]:
    """A stored state (without its write token) as the record every reader takes (ProgressTrack.record's
    shape): the encoded form or JSON. ValueError when it is neither (the attempt's tracking starts afresh)."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogateescape")
    if not text.startswith(b"B"):
        data = orjson.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a progress record is a JSON object")
        return data
    try:
        body = memoryview(text)[1:]
        fmt, n_intervals, n_samples = _HEAD.unpack_from(body)
        if fmt not in (1, FORMAT):
            raise ValueError(f"progress state format {fmt} is not {FORMAT}")
        arrays, offset = [], _HEAD.size
        for count in (n_intervals, n_samples, n_samples):
            values = array("d")
            values.frombytes(body[offset:offset + 8 * count])  # (a short slice: fewer values, caught below)
            if len(values) != count:
                raise ValueError("progress state is cut short")
            arrays.append(_swapped(values) if _SWAP else values)
            offset += 8 * count
        scalars = orjson.loads(body[offset:])
        (attempt, watched_since, last_step, high_step, progress_at, save_started_at, save_ended_at, longest,
         gap, unit, s_high, total, ranks, div), pauses = scalars[:14], (scalars[14] if fmt > 1 else [])
    except (struct.error, TypeError) as exc:
        raise ValueError(f"progress state is malformed: {exc}") from exc
    intervals, rates, times = (a.tolist() for a in arrays)
    out = {"attempt": attempt,
           "hang": {"v": hangs.STATE_VERSION, "watched_since": watched_since, "last_step": last_step,
                    "high_step": high_step, "progress_at": progress_at, "intervals": intervals,
                    "save_started_at": save_started_at, "save_ended_at": save_ended_at,
                    "longest_save_s": longest, "gap_has_save": gap, "pause_steps": pauses},
           "straggler": {"v": stragglers.STATE_VERSION, "unit": unit, "high_step": s_high, "rates": rates,
                         "times": times, "total": total, "rank_times": ranks or {}}}
    if div is not None:
        out["divergence"] = div
    return out


DELTA_FIELDS = 5
"""A plain report as stored after a state (`report_delta`): step, throughput, step time, rank, time."""


def report_delta(step: int | None, throughput: float | None, step_time_s: float | None, rank: int | None,
                 at: float) -> bytes:
    """One plain report (observe_report's arguments) as a line that `replay` applies to the state stored
    before it: what is written for most reports instead of the whole state (about 35 bytes against
    1.6 KB; docs/architecture.md, "Scale"). Floats as repr, which reads back to the same double; the time
    rounded to the millisecond, as observe_report rounds it (rounding it again changes nothing)."""
    return (f"{'-' if step is None else step} {'-' if throughput is None else repr(throughput)} "
            f"{'-' if step_time_s is None else repr(step_time_s)} {'-' if rank is None else rank} "
            f"{round(at, 3)!r}\n").encode()


def replay(track: ProgressTrack, deltas: bytes, hang_keep: int = hangs.MAX_WINDOW,
           straggler_keep: int = stragglers.MAX_SAMPLES) -> None:
    """Apply stored report lines (`report_delta`, oldest first) as the tracker applied each report:
    observe_report, then advance_divergence. ValueError when a line is malformed."""
    for line in deltas.split(b"\n"):
        if not line:
            continue
        fields = line.split(b" ")
        if len(fields) != DELTA_FIELDS:
            raise ValueError(f"progress report line {line[:80]!r} has {len(fields)} fields, not {DELTA_FIELDS}")
        step_b, tp_b, st_b, rank_b, at_b = fields
        step = None if step_b == b"-" else int(step_b)
        track.observe_report(step, None if tp_b == b"-" else float(tp_b), None if st_b == b"-" else float(st_b),
                             None if rank_b == b"-" else int(rank_b), float(at_b), hang_keep, straggler_keep)
        track.advance_divergence(step)


def decode_with_deltas(text: str | bytes, deltas: bytes | None) -> dict[str, Any]:
    """decode_record of a stored state followed by its report lines (`replay`, at the largest windows:
    the verdicts read the newest part of each). ValueError when either cannot be read."""
    data = decode_record(text)
    if not deltas:
        return data
    track = from_record(data, hangs.MAX_WINDOW, stragglers.MAX_SAMPLES)
    replay(track, deltas)
    return decode_record(track.encode())  # (the shape decode_record gives, lists and all)


def _reserved(length: int) -> array:
    """An empty array of doubles whose buffer already holds `length` + 1 of them (a report appends before
    it trims): 10,000 jobs' arrays grown one value at a time fragmented the heap (RSS per job +1/3)."""
    values = array("d", bytes(8 * (length + 1))) if length > 0 else array("d")
    while len(values) > 15:  # shrinking by less than 16 at a time keeps the buffer (CPython's array_resize)
        del values[-15:]
    del values[:]
    return values


def from_record(data: dict[str, Any], hang_keep: int = 0, straggler_keep: int = 0) -> ProgressTrack:
    """A stored record (decode_record) as a track, checked field by field (it may come from another
    replica or release); ValueError when it is malformed."""
    try:
        attempt = int(data["attempt"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"progress record has no attempt: {exc}") from exc
    return ProgressTrack.from_states(attempt, hangs.HangState.from_dict(data["hang"]),
                                     stragglers.StragglerState.from_dict(data["straggler"]),
                                     divergence.DivergenceState.from_dict(data.get("divergence")),
                                     hang_keep, straggler_keep)


def _swapped(values: array) -> array:
    copy = array("d", values)
    copy.byteswap()
    return copy
