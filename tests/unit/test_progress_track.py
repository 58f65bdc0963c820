"""ProgressTrack (relaunch.detector.domain.track) advances in place exactly as the pure, frozen states do
(hangs.observe_progress / observe_checkpoint, stragglers.observe_points, through domain.reference_track.advance),
and its stored form reads back as the same record."""

from __future__ import annotations

import random

import pytest

from relaunch.common.progress import divergence
from relaunch.detector import tracking
from relaunch.detector.domain import reference_track
from relaunch.detector.domain import hangs, stragglers, track
from relaunch.detector.domain.progress import CheckpointMark, Health, OverflowMark, ProgressPoint


def _mark(rng: random.Random, step: int):
    kind = rng.random()
    if kind < 0.06:
        return CheckpointMark(rng.choice(["started", "finished"]), None, None, "hf")
    if kind < 0.1:
        return OverflowMark(rng.choice([None, 2.0 ** rng.randint(0, 12)]), None, "megatron", rng.random() < 0.1)
    throughput = rng.choice([None, rng.uniform(50, 150), 0.0, float("nan")])
    step_time = rng.choice([None, rng.uniform(0.1, 2.0), -1.0])
    health = rng.choice([None, Health(loss=rng.choice([1.5, float("nan")]), grad_norm=None)])
    return ProgressPoint(step=step if rng.random() > 0.1 else None, throughput=throughput, step_time_s=step_time,
                         rank=rng.choice([None, None, None, 0, 1, 3]), preset=rng.choice(["hf", "hf", "hf", "megatron"]),
                         health=health, total=rng.choice([None, None, 400]))


@pytest.mark.parametrize("seed", range(12))
def test_a_track_advances_exactly_as_the_frozen_states(seed):
    rng = random.Random(seed)
    hang_keep, straggler_keep = rng.choice([(100, 45), (3, 5), (256, 256)])
    at, step, attempt = 1.7e9 + rng.random(), 0, 0
    current, live = None, None
    for _ in range(600):
        at += rng.choice([0.0, 0.0004, rng.uniform(0.001, 3.0), rng.uniform(0.5, 1.5)])
        step += rng.choice([1, 1, 1, 0, -3, 5])
        if rng.random() < 0.01:
            attempt += 1
        marks = [_mark(rng, max(0, step)) for _ in range(rng.choice([1, 1, 1, 3]))]
        advanced = reference_track.advance(current, attempt, marks, at, hang_keep, straggler_keep)
        if live is None or live.attempt != attempt:
            live = track.ProgressTrack(attempt, round(at, 3), *((hang_keep, straggler_keep) if seed % 2 else ()))
        if len(marks) == 1 and not isinstance(marks[0], CheckpointMark):
            live.observe_point(marks[0], at, hang_keep, straggler_keep)
        else:
            live.observe(marks, at, hang_keep, straggler_keep)
        current = (attempt, *advanced)
        assert live.hang_state() == current[1]
        assert live.straggler_state() == current[2]
        policy = hangs.HangPolicy(window=min(100, max(3, hang_keep)), floor_s=rng.choice([0.5, 10.0]))
        assert hangs.deadline(live, policy) == hangs.deadline(current[1], policy) == live.deadline(policy)
        assert live.top is None or live.top == max(live.intervals)


def _full_track(seed: int = 3) -> track.ProgressTrack:
    rng = random.Random(seed)
    live, at = track.ProgressTrack(2, 1.7e9), 1.7e9
    for step in range(300):
        at += rng.uniform(0.5, 1.5)
        live.observe_point(ProgressPoint(step, rng.uniform(90, 110), None, rng.choice([None, 1]), "client",
                                         health=Health(loss=2.0)), at, 100, 45)
        live.divergence = divergence.observe(live.divergence, ProgressPoint(step, None, None, None, "client",
                                                                            health=Health(loss=float("nan"))))
    return live


def test_the_stored_form_reads_back_as_the_same_record_and_track():
    live = _full_track()
    record = live.record()
    assert record == reference_track.record(live.attempt, live.hang_state(), live.straggler_state(), live.divergence)
    encoded = live.encode()
    assert encoded.startswith(b"B") and len(encoded) < len(__import__("orjson").dumps(record))
    decoded = track.decode_record(encoded)
    assert decoded["hang"] == {**record["hang"], "intervals": list(record["hang"]["intervals"])}
    back = track.from_record(decoded)
    assert back.hang_state() == live.hang_state() and back.straggler_state() == live.straggler_state()
    assert back.divergence == live.divergence and back.attempt == live.attempt
    # a JSON record (written before this form, and by the hang sweep) reads the same way
    import orjson

    assert track.from_record(track.decode_record(orjson.dumps(record))).hang_state() == live.hang_state()


def test_a_fresh_divergence_state_is_not_stored():
    live = _full_track()
    live.divergence = divergence.DivergenceState()
    assert "divergence" not in track.decode_record(live.encode())
    assert "divergence" not in live.record()


@pytest.mark.parametrize("stored", [b"B", b"B\x01\x05", b"[1, 2]", b"garbage", b"B\x09\x00\x00\x00\x00",
                                    b"B\x01\x00\x00\x00\x00[1, 2]", b"B\x01\x00\x00\x00\x00\xff\xfe"])
def test_a_malformed_stored_state_is_a_value_error(stored):
    with pytest.raises(ValueError):
        track.from_record(track.decode_record(stored))


def test_a_state_cut_short_is_a_value_error():
    encoded = _full_track().encode()
    for cut in (3, 200, 1500, len(encoded) - 3):
        with pytest.raises(ValueError):
            track.decode_record(encoded[:cut])


def test_a_client_report_becomes_the_same_point_as_the_constructor_makes():
    import datetime as dt

    from relaunch.common.schemas import ProgressReported

    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for fields in ({}, {"throughput": 5.0, "step_time_s": 0.2, "rank": 3}, {"loss": float("nan"), "grad_norm": 1.0}):
        msg = ProgressReported(cluster="c", job_id="7", step=4, at=at, **fields)
        point = tracking._client_point(msg)
        health = None if "loss" not in fields else Health(loss=msg.loss, grad_norm=msg.grad_norm, loss_scale=None)
        made = ProgressPoint(step=4, throughput=msg.throughput, step_time_s=msg.step_time_s, rank=msg.rank,
                             preset="client", health=health)
        assert point == made and point.__dict__.keys() == made.__dict__.keys()
        assert repr(point.health) == repr(made.health) and point.total is None


@pytest.mark.parametrize("seed", range(6))
def test_a_report_without_loss_figures_advances_a_track_as_its_point_does(seed):
    """tracking's path for most client reports (observe_report and divergence.observe_step, no point
    made) against observe_point and divergence.observe of the report's point: every field alike after
    each report, through steps that go back, repeat and jump, ranks, missing and odd measures."""
    from relaunch.common.progress import divergence

    rng = random.Random(seed)
    by_point, by_fields = track.ProgressTrack(1, 100.0, 20, 9), track.ProgressTrack(1, 100.0, 20, 9)
    step, at = 0, 100.0
    for _ in range(400):
        step = max(0, step + rng.choice([1, 1, 1, 0, 2, 7, -3]))
        at += rng.choice([0.0, 0.0004, 0.9, 1.0, 1.3, 40.0])
        fields = (rng.choice([step, step, None]), rng.choice([None, None, 95.5, 0.0, float("nan"), float("inf")]),
                  rng.choice([None, 1.0, 1.25, 0.0, -1.0, float("inf")]), rng.choice([None, None, 0, 3]))
        point = ProgressPoint(step=fields[0], throughput=fields[1], step_time_s=fields[2], rank=fields[3],
                              preset="client", health=None)
        by_point.observe_point(point, at, 20, 9)
        by_point.divergence = divergence.observe(by_point.divergence, point)
        by_fields.observe_report(*fields, at, 20, 9)
        by_fields.divergence = divergence.observe_step(by_fields.divergence, fields[0])
        assert by_fields.record() == by_point.record()
        assert by_fields.encode() == by_point.encode() and by_fields.top == by_point.top


@pytest.mark.parametrize("seed", range(6))
def test_a_tracks_divergence_state_advanced_in_place_is_the_state_observe_makes(seed):
    """ProgressTrack.advance_divergence (tracking's path for reports without loss figures: a steady
    state kept as its last step alone) against divergence.observe of the frozen state, through reports
    with and without loss figures, NaN runs, skipped steps and steps that go back: the same state, the
    same verdict, the same stored form after each report, and a steady state read back from storage is
    steady again."""
    from relaunch.common.progress import divergence
    from relaunch.common.progress.parsing import Health, OverflowMark

    rng = random.Random(seed)
    live, frozen = track.ProgressTrack(1, 100.0), divergence.DivergenceState()
    step, steady_seen = 0, 0
    for _ in range(600):
        step = max(0, step + rng.choice([1, 1, 1, 1, 0, 3, -2]))
        kind = rng.random()
        if kind < 0.96:
            returned = live.advance_divergence(step)
            frozen = divergence.observe_step(frozen, step)
            assert (returned is None) == (live._div is None)
            if returned is None:
                steady_seen += 1
                assert divergence.verdict(frozen) is None  # a steady state has no verdict
        else:
            if kind < 0.985:
                mark = ProgressPoint(step=step, throughput=None, step_time_s=None, rank=None, preset="client",
                                     health=Health(loss=1.5 if rng.random() < 0.7 else float("nan"), grad_norm=None,
                                                   loss_scale=None))
            else:
                # (a scale, once seen, is kept: the state is never steady again)
                mark = OverflowMark(None if rng.random() < 0.95 else 2.0 ** rng.randint(-1, 8), None, "client",
                                    at_minimum=rng.random() < 0.02)
            live.divergence = divergence.observe(live.divergence, mark)
            frozen = divergence.observe(frozen, mark)
        assert live.divergence == frozen and divergence.verdict(live.divergence) == divergence.verdict(frozen)
        assert live.record().get("divergence") == (None if frozen == divergence.DivergenceState() else frozen.to_dict())
        stored = track.decode_record(live.encode())
        assert stored.get("divergence") == (None if frozen == divergence.DivergenceState() else frozen.to_dict())
        again = track.from_record(stored)
        assert again.divergence == frozen and (again._div is None) == (live._div is None)
    assert steady_seen > 50  # the steady path was taken, not only the frozen one


@pytest.mark.parametrize("seed", range(8))
def test_report_lines_replayed_on_a_stored_state_give_the_track_advanced_in_place(seed):
    """What the tracker stores for most reports (track.report_delta, after the state it holds) read back
    by a replica that does not hold the state (decode_with_deltas, from_record, replay): every field as
    the track advanced report by report, through steps that go back, repeat and jump, ranks, odd measures
    and times finer than the millisecond."""
    rng = random.Random(seed)
    hang_keep, straggler_keep = rng.choice([(100, 45), (3, 5), (256, 256)])
    live = track.ProgressTrack(1, 100.0, hang_keep, straggler_keep)
    stored, lines = live.encode(), []
    step, at = 0, 1.7e9 + rng.random()
    for n in range(300):
        step = max(0, step + rng.choice([1, 1, 1, 0, 2, 7, -3]))
        at += rng.choice([0.0, 0.0004, 0.9, 1.0, 1.3, 40.0, rng.uniform(0.001, 3.0)])
        fields = (rng.choice([step, step, None]), rng.choice([None, None, 95.5, 0.0, float("nan"), float("inf"),
                                                              rng.uniform(1, 1e6)]),
                  rng.choice([None, 1.0, 1.25, 0.0, -1.0, float("inf"), rng.random()]), rng.choice([None, None, 0, 3]))
        live.observe_report(*fields, at, hang_keep, straggler_keep)
        live.advance_divergence(fields[0])
        lines.append(track.report_delta(*fields, at))
        if rng.random() < 0.05:  # the whole state written again
            stored, lines = live.encode(), []
        if n % 7 == 0 or n == 299:
            read = track.from_record(track.decode_record(stored), hang_keep, straggler_keep)
            track.replay(read, b"".join(lines), hang_keep, straggler_keep)
            assert read.encode() == live.encode()
            # a reader that does not know the job's windows reads the largest: the newest part alike
            record = track.decode_with_deltas(stored, b"".join(lines))
            widest = track.from_record(record)
            assert widest.intervals[-hang_keep:] == live.intervals[-hang_keep:]
            assert widest.rates[-straggler_keep:] == live.rates[-straggler_keep:]
            assert (widest.last_step, widest.high_step, widest.progress_at, widest.total) == \
                (live.last_step, live.high_step, live.progress_at, live.total)


@pytest.mark.parametrize("lines", [b"1 2.0 - -\n", b"1 2.0 - - 3.0 9\n", b"x - - - 1.0\n", b"1 - - - soon\n",
                                   b"\xff\xfe - - - 1\n"])
def test_malformed_report_lines_are_a_value_error(lines):
    with pytest.raises(ValueError):
        track.decode_with_deltas(_full_track().encode(), lines)


def test_a_ranks_infinite_step_time_leaves_a_state_that_reads_back():
    """A report with a rank and step_time_s Infinity (a client may send it) kept inf in the rank's times,
    which the stored form writes as null: every later read found the state malformed and the job's
    tracking started afresh. The rank's time is then the inverse of its throughput, as for no step time."""
    live = track.ProgressTrack(1, 100.0, 100, 45)
    live.observe_report(5, 95.5, float("inf"), 3, 101.0)
    assert live.rank_times == {3: (1.0 / 95.5,)}
    assert track.from_record(track.decode_record(live.encode())).straggler_state() == live.straggler_state()
    frozen = stragglers.observe_points(stragglers.StragglerState(), [
        ProgressPoint(5, 95.5, float("inf"), 3, "client")], 101.0)
    assert frozen.rank_times == {3: (1.0 / 95.5,)}
