"""Divergence rules (relaunch.common.progress.divergence) on lines the frameworks really print: fp16
overflow skips (DeepSpeed's loss scaler, apex/HF), Megatron's skipped-iteration counts, NaN in every
preset; transient skips that dynamic loss scaling recovers from never count."""

from __future__ import annotations

import math

import pytest

from relaunch.common.progress import divergence
from relaunch.common.progress.parsing import OverflowMark, parse_line

DS_OVERFLOW = ("[2023-07-24 13:21:32,378] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
               "Skipping step. Attempted loss scale: {0}, reducing to {1}")
DS_STEP = ("[2023-10-31 08:58:33,237] [INFO] [logging.py:96:log_dist] [Rank 0] step={0}, skipped={1}, lr=[0.001], "
           "mom=[0.9]")
MEGATRON = (" [2025-03-02 10:14:07] iteration {0:8d}/  500000 | consumed samples: 51200 | elapsed time per iteration "
            "(ms): 1234.5 | learning rate: 1.000000E-04 | global batch size:   512 | lm loss: {1} | loss scale: {2} | "
            "grad norm: {3} | number of skipped iterations: {4:3d} | number of nan iterations: {5:3d} |")


def _run(lines):
    state, found = divergence.DivergenceState(), []
    for line in lines:
        mark = parse_line(line)
        if mark is None or not hasattr(mark, "preset") or type(mark).__name__ == "CheckpointMark":
            continue
        state = divergence.observe(state, mark)
        found.append(divergence.verdict(state))
    return state, found


def test_the_scalers_start_up_search_and_a_recovered_overflow_are_not_divergence():
    scale = 2.0 ** 32
    lines = []
    for _ in range(16):  # the scaler halves from 2^32 until steps go through
        lines.append(DS_OVERFLOW.format(int(scale), int(scale / 2)))
        scale /= 2
    for step in range(1, 200):
        lines.append(DS_STEP.format(step, 16))
        if step % 50 == 0:  # now and then an overflow, recovered from
            lines.append(DS_OVERFLOW.format(int(scale), int(scale / 2)))
    _, found = _run(lines)
    assert not any(found)


def test_a_storm_of_skipped_steps_is_divergence():
    lines = [DS_STEP.format(step, 0) for step in range(1, 30)]
    lines += [DS_OVERFLOW.format(1024, 512) for _ in range(12)]
    _, found = _run(lines)
    assert found[-1] is not None and found[-1].signature_id == "divergence_skip_storm"


def test_a_loss_scale_that_collapses_to_its_minimum_is_divergence():
    lines = [DS_STEP.format(step, 0) for step in range(1, 10)] + [DS_OVERFLOW.format(2, 1)]
    _, found = _run(lines)
    assert found[-1].signature_id == "divergence_loss_scale"
    _, found = _run(["Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."])
    assert found[-1].signature_id == "divergence_loss_scale"


def test_megatron_skipped_iterations_storm_and_a_bf16_loss_scale_of_one():
    healthy = [MEGATRON.format(i * 10, "7.1E+00", "1.0", "1.2", 0, 0) for i in range(1, 20)]
    assert not any(_run(healthy)[1])  # bf16 prints loss scale 1.0 on every line
    storm = [MEGATRON.format(i * 10, "7.1E+00", "4096.0", "1.2", 0, 0) for i in range(1, 5)]
    storm += [MEGATRON.format(i * 10, "7.1E+00", "4096.0", "1.2", 10, 0) for i in range(5, 8)]
    assert _run(storm)[1][-1].signature_id == "divergence_skip_storm"


def test_apex_and_hf_gradient_overflow_lines_are_overflow_marks():
    mark = parse_line("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0")
    assert mark == OverflowMark(32768.0, None, "hf_trainer")


@pytest.mark.parametrize("bad", [
    "{{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '0.0005', 'epoch': '{0}'}}",
    "{{'loss': nan, 'grad_norm': 1.0, 'learning_rate': 0.0005, 'epoch': {0}}}",
    "{{'loss': '0', 'grad_norm': 'inf', 'learning_rate': '0.0005', 'epoch': '{0}'}}",
])
def test_three_consecutive_non_finite_reports_are_divergence_two_are_not(bad):
    good = "{{'loss': '4.7', 'grad_norm': '0.6', 'learning_rate': '0.0005', 'epoch': '{0}'}}"
    lines = [good.format(i) for i in range(5)] + [bad.format(5), bad.format(6), good.format(7)]
    assert not any(_run(lines)[1])
    lines = [good.format(i) for i in range(5)] + [bad.format(i) for i in range(5, 8)]
    assert _run(lines)[1][-1].signature_id == "divergence_nonfinite"


@pytest.mark.parametrize("line, loss", [
    ("Epoch 0:  36%|███▌      | 29/80 [00:09<00:16,  3.11it/s, v_num=0, train_loss=nan.0]", math.nan),
    ("step 29/80 | loss inf | 0.32 s/step", math.inf),
    ("[rank0]:[titan] 2025 - root - INFO - step: 29  loss:     nan  grad_norm:     nan  memory:  0.10GiB(0.00%)  "
     "tps: 1,234  mfu: 0.00%", math.nan),
    ("[NeMo I 2025-06-18 16:40:11 nemo_logging:393] Training epoch 0, iteration 9/99 | lr: 1.499e-05 | "
     "global_step: 9 | reduced_train_loss: nan | train_step_timing in s: 0.4381", math.nan),
    ("steps: 100 loss: nan iter time (s): 0.512 samples/sec: 62.500", math.nan),
])
def test_every_preset_reads_a_non_finite_loss(line, loss):
    point = parse_line(line)
    assert point.health is not None and point.health.non_finite() == "loss"
    assert math.isnan(point.health.loss) if math.isnan(loss) else point.health.loss == loss


def test_a_stored_state_round_trips_and_an_old_record_starts_fresh():
    state, _ = _run([DS_STEP.format(1, 0), DS_OVERFLOW.format(4, 2)])
    assert divergence.DivergenceState.from_dict(state.to_dict()) == state
    assert divergence.DivergenceState.from_dict(None) == divergence.DivergenceState()
