"""Lost time by part and ETTR from the ledger's facts (relaunch.common.goodput, docs/goodput.md)."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from relaunch.common.goodput import (PARTS, Attempt, Failure, Fact, completed_saves, goodput, last_save_before,
                                     lost_time, resumed_from, step_time)

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def t(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# One crash, told in facts: attempt 0 runs at 0 s, steps 1 s each from step 1 (t=10) and saves at step
# 1000 (t=1009); it fails at step 1300 (last progress t=1309, the anomaly 3 s later). Attempt 1 runs at
# t=1330, steps first at 1001 (t=1390) and is back at step 1300 at t=1710 (20 s slower than attempt 0).
def crash_facts() -> list[Fact]:
    return [Fact(0, "first_step", 1, t(10)), Fact(0, "save_started", 1000, t(1009)), Fact(0, "saved", 1000, t(1009)),
            Fact(0, "last_progress", 1300, t(1309)),
            Fact(1, "first_step", 1001, t(1390)), Fact(1, "caught_up", 1300, t(1710))]


def crash_attempts() -> dict[int, Attempt]:
    return {0: Attempt(0, running_at=t(0), ended_at=t(1315), high_step=1300, nodes=2),
            1: Attempt(1, running_at=t(1330), nodes=2)}


def test_a_crash_costs_recomputation_detection_recovery_startup_and_warmup():
    facts = crash_facts()
    lost = lost_time(Failure(0, t(1312), "hardware", 1300), facts, completed_saves(facts), crash_attempts())
    assert lost.failed_step == 1300 and lost.checkpoint_step == 1000 and lost.resumed_step == 1000
    assert lost.step_time_s == pytest.approx(1.0, rel=1e-3)
    assert lost.parts["recomputation"] == pytest.approx(300, rel=1e-3)  # steps 1001..1300 again, at 1 s each
    assert lost.parts["detection"] == 3
    assert lost.parts["recovery"] == 18
    assert lost.parts["startup"] == 60
    assert lost.parts["warmup"] == pytest.approx(20, abs=0.5)  # 320 s to do again 300 steps of 1 s
    assert lost.total_s == pytest.approx(401, abs=0.5)
    assert list(lost.parts) == list(PARTS)


def test_a_silent_hang_costs_its_whole_silence_in_detection():
    facts = [Fact(0, "first_step", 1, t(0)), Fact(0, "saved", 50, t(49)), Fact(0, "last_progress", 100, t(99))]
    lost = lost_time(Failure(0, t(99 + 600), "hang", 100), facts, completed_saves(facts), {0: Attempt(0, t(0))})
    assert lost.parts["detection"] == 600
    assert lost.parts["recomputation"] == pytest.approx(50, rel=1e-3)
    assert lost.parts["recovery"] is None and lost.parts["startup"] is None and lost.parts["warmup"] is None
    assert lost.total_s == pytest.approx(650, rel=1e-3)  # unknown parts are left out, never guessed


def test_without_any_checkpoint_a_restart_recomputes_from_the_start():
    facts = [Fact(0, "first_step", 1, t(0)), Fact(0, "last_progress", 201, t(100))]
    lost = lost_time(Failure(0, t(101), "unknown", 201), facts, completed_saves(facts), {})
    assert lost.checkpoint_step is None
    assert lost.parts["recomputation"] == pytest.approx(100.5, rel=1e-3)  # 201 steps of 0.5 s


def test_the_successor_resumes_from_where_it_really_started():
    # attempt 1 printed its first step at 1010 (a log interval of 10 after the checkpoint of 1000)
    saves = completed_saves([Fact(0, "saved", 500, t(1)), Fact(0, "saved", 1000, t(2))])
    assert resumed_from(saves, 1, 1010) == 1000
    assert resumed_from(saves, 1, 700) == 500  # an older checkpoint loaded
    assert resumed_from(saves, 1, 5) == 5  # from scratch: no save at or below its first step
    assert resumed_from(saves, 1, None) is None
    assert resumed_from(saves, 0, 1010) == 1010  # a save of the attempt itself is not where it resumed


def test_a_started_save_counts_only_once_the_attempt_stepped_past_it():
    facts = [Fact(0, "save_started", 100, t(10)), Fact(0, "last_progress", 100, t(12))]
    assert completed_saves(facts) == ()  # it failed during its save
    assert [s.step for s in completed_saves(facts, {0: 105})] == [100]
    facts = [Fact(0, "save_started", 100, t(10)), Fact(0, "last_progress", 150, t(60))]
    assert [s.step for s in completed_saves(facts)] == [100]
    # a step from another attempt proves nothing about this save
    facts = [Fact(0, "save_started", 100, t(10)), Fact(1, "last_progress", 150, t(60))]
    assert completed_saves(facts) == ()


def test_saves_without_a_step_and_repeated_ones_are_counted_once():
    facts = [Fact(0, "saved", None, t(5)), Fact(0, "saved", 10, t(8)), Fact(0, "saved", 10, t(7))]
    saves = completed_saves(facts)
    assert [(s.step, s.at) for s in saves] == [(10, t(7))]


def test_the_last_save_is_the_newest_before_the_failure():
    saves = completed_saves([Fact(0, "saved", 100, t(10)), Fact(0, "saved", 200, t(20)), Fact(1, "saved", 300, t(50))])
    assert last_save_before(saves, 0).step == 200
    assert last_save_before(saves, 0, t(15)).step == 100
    assert last_save_before(saves, 1).step == 300
    assert last_save_before(saves, 0, t(5)) is None


def test_step_time_needs_two_steps_apart_in_time():
    assert step_time([Fact(0, "first_step", 10, t(0)), Fact(0, "last_progress", 30, t(10))], 0) == 0.5
    assert step_time([Fact(0, "first_step", 10, t(0)), Fact(0, "last_progress", 10, t(10))], 0) is None
    assert step_time([Fact(0, "first_step", 10, t(0))], 0) is None
    assert step_time([Fact(0, "first_step", 10, t(5)), Fact(0, "last_progress", 30, t(5))], 0) is None


def test_no_part_is_negative_when_clocks_disagree():
    facts = [Fact(0, "first_step", 1, t(0)), Fact(0, "last_progress", 11, t(10)), Fact(1, "first_step", 1, t(20))]
    attempts = {0: Attempt(0, t(0)), 1: Attempt(1, running_at=t(25))}  # first step before RUNNING was recorded
    lost = lost_time(Failure(0, t(9), "unknown", 11), facts, (), attempts)  # detected before the last progress
    assert all(v is None or v >= 0 for v in lost.parts.values())
    assert lost.parts["detection"] == 0 and lost.parts["startup"] == 0


def test_ettr_of_a_job_with_one_crash():
    facts = crash_facts() + [Fact(1, "last_progress", 2000, t(2410))]
    figures = goodput(crash_attempts().values(), [Failure(0, t(1312), "hardware", 1300)], facts, now=t(2500),
                      ended_at=t(2420))
    assert figures.wall_s == 2420
    # active: 1299 s (attempt 0) + 1020 s (attempt 1); wasted: 300 s recomputed + 20 s warm-up
    assert figures.productive_s == pytest.approx(1299 + 1020 - 320, abs=0.5)
    assert figures.ettr == pytest.approx((1299 + 1020 - 320) / 2420, abs=1e-3)
    out = figures.as_dict()
    assert out["lost_by_part_s"]["recomputation"] == pytest.approx(300, rel=1e-3)
    assert [c["step"] for c in out["checkpoints"]] == [1000]
    assert out["failures"][0]["resumed_step"] == 1000


def test_a_running_job_counts_until_now_and_one_without_progress_has_no_ettr():
    running = goodput([Attempt(0, running_at=t(0))], [], [Fact(0, "first_step", 1, t(100))], now=t(1000))
    assert running.wall_s == 1000 and running.productive_s == 900 and running.ettr == 0.9
    silent = goodput([Attempt(0, running_at=t(0))], [], [], now=t(1000))
    assert silent.ettr is None and silent.productive_s is None and silent.failures == ()


def test_only_each_attempts_first_failure_counts():
    failures = [Failure(0, t(1320), "unknown", 1300), Failure(0, t(1312), "hardware", 1300)]
    figures = goodput(crash_attempts().values(), failures, crash_facts(), now=t(2000))
    assert len(figures.failures) == 1 and figures.failures[0].fault_class == "hardware"


def test_the_order_of_the_facts_does_not_matter():
    facts = crash_facts() + [Fact(0, "saved", 500, t(509)), Fact(1, "last_progress", 1500, t(1900))]
    expected = goodput(crash_attempts().values(), [Failure(0, t(1312), "hardware", 1300)], facts, now=t(2000))
    rng = random.Random(7)
    for _ in range(20):
        shuffled = facts[:]
        rng.shuffle(shuffled)
        again = goodput(list(crash_attempts().values())[::-1], [Failure(0, t(1312), "hardware", 1300)], shuffled,
                        now=t(2000))
        assert again.as_dict() == expected.as_dict()


def test_two_failures_in_a_row_each_have_their_parts():
    facts = crash_facts() + [Fact(1, "last_progress", 1400, t(1810)), Fact(2, "first_step", 1001, t(1900))]
    attempts = {**crash_attempts(), 2: Attempt(2, running_at=t(1850))}
    figures = goodput(attempts.values(), [Failure(0, t(1312), "hardware", 1300), Failure(1, t(1820), "hang", 1400)],
                      facts, now=t(2000))
    second = figures.failures[1]
    assert second.checkpoint_step == 1000 and second.resumed_step == 1000  # no save in attempt 1
    assert second.parts["detection"] == 10 and second.parts["recovery"] == 30 and second.parts["startup"] == 50
    assert second.step_time_s == pytest.approx(420 / 399, rel=1e-3)
    assert second.parts["recomputation"] == pytest.approx(400 * 420 / 399, rel=1e-3)


def test_a_load_line_says_where_the_successor_resumed():
    # it loaded the checkpoint of step 500, not the newest (1000): 800 steps are done again, not 300
    facts = crash_facts() + [Fact(0, "saved", 500, t(509)), Fact(1, "loaded", 500, t(1380))]
    lost = lost_time(Failure(0, t(1312), "hardware", 1300), facts, completed_saves(facts), crash_attempts())
    assert lost.resumed_step == 500 and lost.checkpoint_step == 1000
    assert lost.parts["recomputation"] == pytest.approx(800, rel=1e-3)


def test_the_goodput_page_defines_every_part_fact_and_gauge():
    from pathlib import Path

    from relaunch.api import metrics
    from relaunch.common.goodput import FACT_KINDS
    from relaunch.common.schemas import CheckpointFact

    page = (Path(__file__).resolve().parents[2] / "docs" / "goodput.md").read_text()
    for part in ("recomputation", "detection", "recovery", "start-up", "warm-up", "ETTR", "MTTR"):
        assert f"| {part}" in page or f"**{part}" in page or f"## One job: {part}" in page, part
    assert set(FACT_KINDS) == set(CheckpointFact.model_fields["kind"].annotation.__args__)
    for kind in FACT_KINDS:
        assert f"`{kind}`" in page, kind
    for gauge in (metrics.FLEET_ETTR, metrics.FLEET_LOST, metrics.FLEET_MTTR, metrics.FLEET_FAILURE_RATE,
                  metrics.FLEET_FAILURES):
        assert gauge._name in page, gauge._name


def test_thousands_of_saves_are_read_alike():
    """(No clock here: a 0.5 s bound failed at 0.58 s beside a loaded CI run's training ranks; speed targets
    live in bench/, not in timed unit tests.)"""
    facts = [Fact(0, "first_step", 1, t(0))]
    for i in range(1, 3001):  # a save every 100 steps, only its start seen (HF without rotation)
        facts.append(Fact(0, "save_started", 100 * i, t(100 * i)))
    facts.append(Fact(0, "last_progress", 300_050, t(300_050)))
    saves = completed_saves(facts)
    assert len(saves) == 3000 and saves[-1].step == 300_000
    assert len(completed_saves(facts[:-1])) == 2999  # the last one: nothing after it shows it written
    assert len(completed_saves(facts[:-1], {0: 300_001})) == 3000
