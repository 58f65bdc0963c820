"""`relaunch classify` reads divergence from a log's progress lines as the live detector does (issue 36,
item 2): NaN reports, late fp16 overflow storms, never the scaler's start-up search; the replay runs
only when the scan saw a WATCH line, and a log without one can reach no verdict."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaunch.client import classify_command
from relaunch.common.diagnosis.classifying import Classification, Evidence
from relaunch.common.diagnosis.offline import verdict_of_stream
from relaunch.common.diagnosis.scan_engines import hyperscan_importable, scanner_with_engine
from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.common.diagnosis.verdicts import choose
from relaunch.common.progress import divergence
from relaunch.common.progress.replay import Diverged, divergence_in_lines
from relaunch.common.progress.watch import WATCH, WATCH_SOURCES, watched

HF = "{{'loss': {0}, 'grad_norm': {1}, 'learning_rate': 1e-05, 'epoch': 0.{2}}}"
DS_OVERFLOW = ("[2026-12-04 05:12:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
               "Skipping step. Attempted loss scale: {0}, reducing to {1}")
DS_STEP = "[2026-12-04 01:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={0}, skipped={1}, lr=[2.9e-05]"
MEGATRON = (" iteration {0:8d}/  500000 | consumed samples: 51200 | elapsed time per iteration (ms): 1234.5 | "
            "lm loss: {1} | loss scale: {2} | grad norm: {3} | number of skipped iterations: {4:3d} | "
            "number of nan iterations: {5:3d} |")
ENGINES = ["python", pytest.param("hyperscan", marks=pytest.mark.skipif(not hyperscan_importable(),
                                                                        reason="hyperscan is not installed"))]


def hf_nan_grad_norm() -> list[str]:
    """The issue's file: HF Trainer metric lines, the grad norm NaN in several in a row."""
    return [HF.format(1.2, 0.8, i) for i in range(1, 6)] + [HF.format(0.0, "nan", i) for i in range(6, 10)]


def start_up_burst(scale: int = 65536, skips: int = 10) -> list[str]:
    lines = []
    for _ in range(skips):
        lines.append(DS_OVERFLOW.format(scale, scale // 2))
        scale //= 2
    return lines


def late_storm() -> list[str]:
    """Hours into a run the scale falls from 64 to 2, steps still going through in between."""
    lines = start_up_burst() + [DS_STEP.format(step, 10) for step in range(10, 52000, 10)]
    step, skipped, scale = 51990, 10, 64
    for k in range(5):
        lines.append(DS_OVERFLOW.format(scale, scale // 2))
        scale, skipped = scale // 2, skipped + 1
        step += 10
        lines.append(DS_STEP.format(step, skipped))
    return lines


def verdict_json(lines: list[str], engine: str, capsys, tmp_path) -> dict | None:
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    assert classify_command.main(["--json", "--engine", engine, str(path)]) == 0
    import json

    return json.loads(capsys.readouterr().out)["anomaly"]


@pytest.mark.parametrize("engine", ENGINES)
def test_hf_metric_lines_with_a_nan_grad_norm_are_divergence_for_classify_too(engine, capsys, tmp_path):
    found = verdict_json(hf_nan_grad_norm(), engine, capsys, tmp_path)
    assert found is not None and (found["kind"], found["signature"], found["action"]) == (
        "divergence", "divergence_nonfinite", "stop")
    assert found["evidence"] == [HF.format(0.0, "nan", 8)]  # the third NaN report in a row


@pytest.mark.parametrize("engine", ENGINES)
def test_a_late_overflow_storm_is_divergence_and_the_start_up_burst_is_not(engine, capsys, tmp_path):
    found = verdict_json(late_storm(), engine, capsys, tmp_path)
    assert found is not None and found["signature"] == "divergence_loss_scale", found
    assert "from 64 to 2" in found["evidence"][0] or "reducing to 2" in found["evidence"][0]
    healthy = start_up_burst() + [DS_STEP.format(step, 10) for step in range(10, 5000, 10)]
    healthy += [DS_OVERFLOW.format(65536, 32768), DS_STEP.format(5000, 11)]  # one overflow, recovered from
    assert verdict_json(healthy, engine, capsys, tmp_path) is None


def test_the_fall_starts_again_once_the_scale_grew_back_or_a_clean_window_passed():
    lines = start_up_burst() + [DS_STEP.format(step, 10) for step in range(10, 500, 10)]
    for scale in (64, 32, 16):  # three halvings: 8-fold, then the scale grows back (a new level)
        lines.append(DS_OVERFLOW.format(scale, scale // 2))
    for scale in (256, 128, 64, 32):  # four more from a higher level: 16-fold at most
        lines.append(DS_OVERFLOW.format(scale, scale // 2))
    assert divergence_in_lines(lines) is None
    assert divergence_in_lines(lines + [DS_OVERFLOW.format(16, 8)]) is not None  # 256 -> 8: 32-fold


def test_a_piped_log_is_replayed_too():
    stream = io.BytesIO(("\n".join(hf_nan_grad_norm()) + "\n").encode())
    stream.seekable = lambda: False  # a pipe
    found = verdict_of_stream(stream, scanner_with_engine(builtin_catalogue(), "python"))
    assert found is not None and found.kind == "divergence"


def _crash(index: int, cascade: bool = False) -> Classification:
    return Classification(signature_id="cuda_oom", category="cuda_oom", fault_domain="resource", action="stop",
                          role="symptom" if cascade else "cause", cascade=cascade, summary="", nodes=(), ranks=(),
                          evidence=(Evidence(index, "torch.OutOfMemoryError: CUDA out of memory."),), lines=1)


def test_the_first_in_the_log_wins_and_a_cascade_never_beats_a_divergence():
    diverged = Diverged(divergence.Divergence("divergence_nonfinite", 9, "training diverged"), 20, "{'loss': nan}")
    assert choose(_crash(10), diverged).signature_id == "cuda_oom"
    assert choose(_crash(30), diverged).kind == "divergence"
    assert choose(_crash(10, cascade=True), diverged).kind == "divergence"
    assert choose(None, diverged).kind == "divergence" and choose(_crash(3), None).signature_id == "cuda_oom"


# -- WATCH: without a WATCH line no verdict; every non-finite value a preset reads is a WATCH line -------
VALUES = ["1.5", "0.0", "nan", "NaN", "inf", "-inf", "'nan'", "Infinity", "nan.0", "2.1E+00"]
TEMPLATES = [
    lambda v, s: HF.format(v, v, s % 10),
    lambda v, s: MEGATRON.format(s, v, "4096.0", v, s % 3 * (s % 7 == 0), 0),
    lambda v, s: f"step: {s:>5}  loss: {v:>7}  memory: 61.12GiB(77.19%)  tps: 12,000  grad_norm: {v}",
    lambda v, s: f"Epoch 0:  40%|████      | {s}/1000 [01:00<01:30,  6.67it/s, loss={v}, v_num=1]",
    lambda v, s: f"step {s}/1000 | loss {v} | 0.32 s/step",
    lambda v, s: f"Training epoch 0, iteration {s}/999 | global_step: {s} | reduced_train_loss: {v} | "
                 f"train_step_timing in s: 0.43",
    lambda v, s: DS_STEP.format(s, s // 50),
    lambda v, s: DS_OVERFLOW.format(2 ** (s % 17), 2 ** (s % 17) // 2),
    lambda v, s: f"steps: {s} loss: {v} iter time (s): 0.500 samples/sec: 64.000",
    lambda v, s: "gpu-node001:12:34 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC/read",
]
lines_strategy = st.lists(st.tuples(st.integers(0, len(TEMPLATES) - 1), st.sampled_from(VALUES),
                                    st.integers(1, 3000)), min_size=1, max_size=80).map(
    lambda items: [TEMPLATES[t](v, s) for t, v, s in items])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=lines_strategy)
def test_a_log_without_a_watch_line_reaches_no_divergence(lines):
    if not any(WATCH.search(line) for line in lines):
        assert divergence_in_lines(lines) is None
    assert watched("\n".join(lines) + "\n" + " " * 9000) == any(WATCH.search(line) for line in lines)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "'nan'", "Infinity", "nan.0", '"inf"'])
@pytest.mark.parametrize("template", range(6))
def test_every_non_finite_value_a_preset_reads_is_a_watch_line_for_python_and_the_engine(template, value):
    from relaunch.common.progress.parsing import parse_line

    line = TEMPLATES[template](value, 100)
    mark = parse_line(line)
    if mark is None or mark.health is None or mark.health.non_finite() is None:
        pytest.skip("this preset does not read the value there")
    assert WATCH.search(line)
    assert re.compile(b"|".join(WATCH_SOURCES), re.MULTILINE).search(line.encode())


def test_healthy_progress_lines_are_no_watch_lines():
    for template in TEMPLATES[:6]:
        assert not WATCH.search(template("2.345", 8)), template("2.345", 8)
    assert not WATCH.search(MEGATRON.format(10, "7.1E+00", "1.0", "1.2", 0, 0))
    assert not WATCH.search(DS_STEP.format(10, 0))
