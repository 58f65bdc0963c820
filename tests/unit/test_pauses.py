"""No hang on a healthy pause (issue 37, item 0): evaluation phases recognised in every preset from the
frameworks' own wording, the pause a job takes learnt per job, a pause in the job's rhythm allowed once
seen, a floor in minutes by default, and the no-progress rule never stopping a job that made progress
between its hangs."""

from __future__ import annotations

import datetime as dt

import pytest

from relaunch.common.progress import rhythm
from relaunch.common.progress.parsing import CheckpointMark, ProgressPoint, parse_line
from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.history import AttemptRecord, History
from relaunch.decider.domain.policy import Policy, decide
from relaunch.detector.domain import hangs
from relaunch.detector.domain.hangs import HangPolicy, HangState, new_state, observe_checkpoint, observe_progress
from relaunch.detector.domain.track import ProgressTrack, decode_record, from_record
from relaunch.detector.settings import DetectorSettings

FLOOR = 10.0
POLICY = HangPolicy(floor_s=FLOOR)  # the test stacks' floor
T0 = 1_780_000_000.0


# -- evaluation lines, as each framework prints them ------------------------------------------------
@pytest.mark.parametrize("line, phase, step, preset", [
    # HF Trainer (transformers 5.24, captured): the evaluation bar is nested below the training bar, and
    # tqdm ends each of its redraws with the cursor-up escape; the metrics dict ends the evaluation.
    (b"  0%|          | 0/3 [00:00<?, ?it/s]\x1b[A", "started", None, "hf_trainer"),
    (b"100%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88"
     b"\xe2\x96\x88| 3/3 [00:00<00:00, 883.38it/s]\x1b[A", "started", None, "hf_trainer"),
    ("{'eval_loss': '4.711', 'eval_runtime': '0.0065', 'eval_samples_per_second': '3711', "
     "'eval_steps_per_second': '463.9', 'epoch': '0.009766'}", "finished", None, "hf_trainer"),
    ("{'eval_loss': 2.1, 'eval_runtime': 5.2, 'eval_samples_per_second': 9.6, 'epoch': 1.0}", "finished", None,
     "hf_trainer"),
    ("[INFO|trainer.py:4228] 2025-01-01 00:00:00,000 >> ***** Running Evaluation *****", "started", None,
     "hf_trainer"),
    # Lightning's validation bar: TQDM (before its first batch, and with its dataloader), and Rich
    ("Validation: |          | 0/? [00:00<?, ?it/s]\x1b[A", "started", None, "lightning"),
    ("Validation DataLoader 0:  40%|████      | 2/5 [00:01<00:01,  1.50it/s]\x1b[A", "started", None, "lightning"),
    ("Validation DataLoader 0 ━━━━━━━━━━╺━━━━━━━━━ 2/5 0:00:01 • 0:00:02 1.50it/s", "started", None, "lightning"),
    # Megatron-LM (and Megatron-DeepSpeed): verbose evaluations announce themselves; every one ends so
    (" validation loss at iteration 1000 | lm loss value: 2.724416E+00 | lm loss PPL: 1.525E+01 | ", "finished",
     1000, "megatron"),
    ("validation loss at iteration 100 on validation set | lm loss value: 2.3E+00 | lm loss PPL: 9.9E+00 |",
     "finished", 100, "megatron"),
    ("Evaluating on 1024 samples", "started", None, "megatron"),
    ("Evaluating iter 10/100", "started", None, "megatron"),
    # torchtitan: MetricsProcessor.log_validation, at the end of a validation
    ("[rank0]:[titan] 2025-06-01 12:00:00,000 - root - INFO - \x1b[33mvalidate step: 10  \x1b[32mloss:  5.1234  "
     "\x1b[38;2;54;234;195mmemory:  1.20GiB(3.00%)  \x1b[34mtps: 1,234\x1b[39m", "finished", 10, "torchtitan"),
    # a training script's own lines
    ("evaluating at step 20 ...", "started", None, "plain"),
    ("0: Running validation", "started", None, "plain"),
    ("eval loss 1.2345 | 3.2 s", "finished", None, "plain"),
    ("validation loss: 1.2345", "finished", None, "plain"),
])
def test_evaluation_phases_are_recognised_in_every_preset(line, phase, step, preset):
    mark = parse_line(line)
    assert mark == CheckpointMark(phase, step, mark.rank, preset, "eval")


@pytest.mark.parametrize("line, step", [
    (" 83%|████████▎ | 10/12 [00:00<00:00, 56.07it/s]", 10),  # HF's training bar: the first, not nested
    ("[rank0]:[titan] 2025-06-01 - root - INFO - step: 10  loss:  5.1234  memory:  1.20GiB(3.00%)  tps: 1,234", 10),
    ("Epoch 0:  25%|██▌       | 10/40 [00:05<00:15,  2.00it/s, v_num=0, train_loss=4.71]", 10),
])
def test_training_lines_stay_steps(line, step):
    point = parse_line(line)
    assert isinstance(point, ProgressPoint) and point.step == step


def test_other_validation_words_are_nothing():
    assert parse_line("some validation of the config passed") is None
    assert parse_line("Saving model checkpoint to out/checkpoint-500").kind == "save"


# -- the hang rules ---------------------------------------------------------------------------------
def _steps(state: HangState, first: int, last: int, t: float) -> tuple[HangState, float]:
    for step in range(first, last + 1):
        state = observe_progress(state, step, t)
        t += 1.0
    return state, t - 1.0


def test_a_phase_three_times_the_floor_is_no_hang():
    state, t = _steps(new_state(T0), 1, 20, T0)
    state = observe_checkpoint(state, "started", t + 2)  # the evaluation bar's first redraw
    assert hangs.verdict(state, POLICY, t + 3 * FLOOR) is None
    assert hangs.deadline(state, POLICY) >= t + 2 + POLICY.checkpoint_s
    state = observe_checkpoint(state, "finished", t + 3 * FLOOR)
    state = observe_progress(state, 21, t + 3 * FLOOR + 1)
    assert state.longest_save_s == pytest.approx(3 * FLOOR - 2) and state.pause_steps == (20,)
    assert max(state.intervals) == 1.0  # the pause is no step interval


def test_the_pause_a_job_takes_is_learnt_with_a_margin():
    policy = HangPolicy(floor_s=FLOOR, checkpoint_s=60.0)
    state, t = _steps(new_state(T0), 1, 20, T0)
    state = observe_checkpoint(observe_checkpoint(state, "started", t), "finished", t + 100)  # a 100 s evaluation
    state, t = _steps(state, 21, 40, t + 101)
    state = observe_checkpoint(state, "started", t)
    assert hangs.deadline(state, policy) == pytest.approx(t + 300)  # 3 x the longest pause, above 60 s
    assert hangs.verdict(state, policy, t + 299) is None
    assert "longest pause seen (100 s)" in hangs.verdict(state, policy, t + 300).reason


def test_a_pause_seen_only_at_its_end_lasted_the_silence_before_it():
    """Megatron-LM prints `validation loss at iteration N` when its evaluation is over, and nothing before."""
    state, t = _steps(new_state(T0), 1, 20, T0)
    state = observe_checkpoint(state, "finished", t + 8)  # 8 s after step 20: under the floor
    assert state.longest_save_s == pytest.approx(8) and state.pause_steps == (20,)


def test_a_pause_in_the_jobs_rhythm_is_allowed_once_seen():
    state, t = _steps(new_state(T0), 1, 20, T0)
    state = observe_checkpoint(state, "finished", t + 8)  # every 20 steps, 8 s: learnt
    state, t = _steps(state, 21, 40, t + 9)
    # at step 40, in the rhythm: 3 x 8 s, though no line announces the pause
    assert hangs.verdict(state, POLICY, t + 20) is None
    hang = hangs.verdict(state, POLICY, t + 24)
    assert hang is not None and "rhythm (after every 20 steps)" in hang.reason
    # a silence after step 41, out of the rhythm, gets the floor
    state = observe_progress(state, 41, t + 1)
    assert hangs.verdict(state, POLICY, t + 1 + FLOOR) is not None
    assert hangs.deadline(state, POLICY) == pytest.approx(t + 1 + FLOOR)


def test_pauses_at_start_up_say_nothing_of_a_rhythm():
    assert hangs.with_pause_step((), 1) == () and hangs.with_pause_step((), 0) == ()
    assert hangs.rhythm((20, 40)) == 20 and hangs.rhythm((20, 50)) == 10 and hangs.rhythm(()) is None
    assert hangs.rhythm((7, 10)) is None  # no common rhythm
    steps = ()
    for step in range(10, 200, 10):
        steps = hangs.with_pause_step(steps, step)
    assert len(steps) == hangs.MAX_PAUSE_STEPS


def test_the_hot_path_track_agrees_with_the_rules():
    marks = ([(s, None) for s in range(1, 21)] + [(None, "finished")] + [(s, None) for s in range(21, 41)]
             + [(None, "started")] + [(None, "finished")] + [(41, None), (42, None)])
    state, track, t = new_state(T0), ProgressTrack(0, T0), T0
    for step, phase in marks:
        t += 8.0 if phase else 1.0
        if phase:
            state = observe_checkpoint(state, phase, t)
            track.observe([CheckpointMark(phase, None, None, "megatron", "eval")], t)
        else:
            state = observe_progress(state, step, t)
            track.observe([ProgressPoint(step, None, None, None, "plain")], t)
        assert track.hang_state() == state
        assert track.deadline(POLICY) == pytest.approx(hangs.deadline(state, POLICY))
    assert state.pause_steps == (20, 40)
    again = from_record(decode_record(track.encode()))
    assert again.hang_state() == state


def test_the_pauses_learnt_are_the_jobs_and_carry_over_to_its_next_attempt():
    first = ProgressTrack(0, T0)
    for step in range(1, 21):
        first.observe([ProgressPoint(step, None, None, None, "plain")], T0 + step)
    first.observe([CheckpointMark("finished", 20, None, "megatron", "eval")], T0 + 28)  # 8 s, every 20 steps
    second = ProgressTrack(1, T0 + 100).carrying(first)
    assert (second.pause_steps, second.longest_save_s) == ((20,), pytest.approx(8))
    assert second.progress_at is None and not second.intervals  # its start-up gets the warm-up again
    assert ProgressTrack(0, T0).carrying(second).pause_steps == ()  # never from a later attempt
    assert ProgressTrack(1, T0).carrying(None).pause_steps == ()


def test_rates_printed_just_after_a_pause_are_no_straggler_samples():
    """HF's bar after a 90 s evaluation reads `8.07s/it` for a job of 60 it/s: tqdm's rate is an average
    that decays a redraw at a time (seen in the frameworks tier, where it made a straggler)."""
    from relaunch.detector.domain import stragglers
    from relaunch.detector.domain.reference_track import advance as _advance

    def bar(step: int, rate: float) -> ProgressPoint:
        return ProgressPoint(step, rate, 1 / rate, None, "hf_trainer")

    track, frozen, t = ProgressTrack(0, T0), None, T0
    marks = [[bar(s, 60.0)] for s in range(1, 41)] + [[CheckpointMark("started", None, None, "hf_trainer", "eval")],
             [CheckpointMark("finished", None, None, "hf_trainer", "eval")]]
    marks += [[bar(s, 0.2)] for s in range(41, 41 + hangs.SHADOW_STEPS)] + [[bar(s, 60.0)] for s in range(66, 80)]
    for batch in marks:
        t += 90.0 if isinstance(batch[0], CheckpointMark) else 0.5
        track.observe(batch, t)
        hang, strag = _advance(frozen and (0, *frozen), 0, batch, t)
        frozen = (hang, strag)
    assert track.straggler_state() == frozen[1] and min(track.rates) == 60.0
    assert stragglers.verdict(track.straggler_state(), stragglers.StragglerPolicy()) is None


def test_states_stored_before_the_rhythm_read_back_without_one():
    data = new_state(T0).to_dict()
    del data["pause_steps"]
    assert HangState.from_dict(data).pause_steps == ()


def test_the_default_floor_is_minutes():
    assert HangPolicy().floor_s == 600.0 == rhythm.FLOOR_S
    assert DetectorSettings.model_fields["hang_floor_s"].default == 600.0


# -- the no-progress rule ---------------------------------------------------------------------------
NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def _hang(attempt: int, last_step: int, advanced: bool | None) -> AnomalyDetected:
    return AnomalyDetected(anomaly_id=f"c.1.{attempt}.hang", cluster="c", job_id="1", attempt=attempt, kind="hang",
                           source="progress", signature_id="hang_no_progress", category="hang", fault_domain="unknown",
                           action="restart", summary="s", detected_at=NOW, last_step=last_step, advanced=advanced)


def test_no_progress_never_stops_a_job_that_made_progress_between_its_hangs():
    """The issue's case: a job that starts again from step 0 and pauses at step 20 each time."""
    history = History(attempts=(AttemptRecord(0, NOW - dt.timedelta(minutes=5), high_step=20),))
    policy = Policy(max_attempts=5, max_attempts_cap=5)
    assert decide(history, _hang(1, 20, advanced=True), policy, NOW).rule == "within_budget"
    # an attempt that never stepped forward (resumed at step 20 and went silent) is stopped as before
    assert decide(history, _hang(1, 20, advanced=False), policy, NOW).rule == "no_progress"
    assert decide(history, _hang(1, 20, advanced=None), policy, NOW).rule == "no_progress"
