"""Progress, read from real runs of real frameworks (tests/fixtures/frameworks, captured by
scripts/capture-framework-fixtures.sh from tests/frameworks/scripts on torch 2.13.0 CPU, transformers
5.24.0, pytorch-lightning 2.6.6, torchrun DDP on gloo): the step counts relaunch finds against the true
ones, divergence found within 3 logged steps of the first bad value, healthy runs never flagged, and the
live follower's frames giving exactly what `relaunch progress` reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaunch.client.cli import app
from relaunch.common.progress.reading import RICH_ONLY, summarize, summarize_frames
from relaunch.detector.adapters.logfiles import Access, read_new_lines

ANY = Access(os.geteuid(), os.getegid(), ("/",))

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"

# case: (true steps, formats, first bad step or None)
RUNS = {
    "hf_healthy": (40, ["hf_trainer"], None),
    "hf_nan": (40, ["hf_trainer"], 15),
    "lightning_tqdm_plain": (40, ["lightning", "plain"], None),
    "lightning_tqdm_nan": (40, ["lightning"], 15),
    "ddp_plain_healthy": (30, ["plain"], None),
    "ddp_megatron_healthy": (30, ["megatron"], None),
    "ddp_megatron_nan": (30, ["megatron"], 12),
    "ddp_torchtitan_healthy": (30, ["torchtitan"], None),
    "ddp_torchtitan_nan": (30, ["torchtitan"], 12),
    "ddp_deepspeed_healthy": (30, ["deepspeed"], None),
}


def _summary(case: str):
    with open(FIXTURES / f"{case}.log", "rb") as stream:
        return summarize(case, stream)


@pytest.mark.parametrize("case", sorted(RUNS))
def test_every_step_of_a_real_run_is_seen(case):
    steps, formats, _ = RUNS[case]
    found = _summary(case).as_json()
    assert (found["steps"], found["first_step"], found["last_step"]) == (steps, 1, steps)
    assert found["formats"] == formats


@pytest.mark.parametrize("case", sorted(RUNS))
def test_divergence_is_found_within_three_logged_steps_and_never_in_a_healthy_run(case):
    _, _, first_bad = RUNS[case]
    found = _summary(case).divergence
    if first_bad is None:
        assert found is None
    else:
        assert found is not None and found.signature_id == "divergence_nonfinite"
        assert first_bad <= found.step <= first_bad + 2, found


def test_lightning_rich_bar_is_seen_only_at_the_end_and_relaunch_says_so():
    found = _summary("lightning_rich")
    assert found.as_json()["steps"] == 1 and found.last_step == 40
    assert RICH_ONLY in found.notes


@pytest.mark.parametrize("case", ["hf_healthy", "lightning_tqdm_plain", "ddp_megatron_nan"])
def test_the_live_followers_frames_read_the_same_as_the_offline_command(case, tmp_path):
    path = FIXTURES / f"{case}.log"
    frames, offset = [], 0
    while (chunk := read_new_lines(str(path), offset, ANY, max_read=4096)) is not None and chunk.next_offset != offset:
        frames += chunk.lines
        offset = chunk.next_offset
    live = summarize_frames(case, frames)
    offline = _summary(case)
    assert live.as_json() == offline.as_json()
    assert (live.divergence is None) == (offline.divergence is None)


def test_a_line_after_a_long_redrawn_bar_is_not_lost_in_the_cut(tmp_path):
    bar = "".join(f"\r 50%|█████     | {i}/80000 [00:03<00:17,  3.90it/s]" for i in range(1, 2000))
    path = tmp_path / "slurm-1.out"
    path.write_bytes((bar + "\nslurmstepd: error: *** JOB 1 ON node1 CANCELLED AT 2026-12-01T10:00:00 DUE TO TIME "
                      "LIMIT ***\n").encode())
    chunk = read_new_lines(str(path), 0, ANY)
    assert any("DUE TO TIME LIMIT" in line for line in chunk.lines)
    assert max(len(line) for line in chunk.lines) < 200  # frames, not one endless line
    assert chunk.ends[-1] == chunk.next_offset == path.stat().st_size


def test_relaunch_progress_json_is_one_object_per_file_with_the_contracts_keys():
    files = [str(FIXTURES / "hf_healthy.log"), str(FIXTURES / "lightning_rich.log")]
    result = CliRunner().invoke(app, ["progress", "--json", *files])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [set(r) for r in rows] == [{"file", "formats", "steps", "first_step", "last_step", "step_time_s",
                                       "throughput", "hang_timeout_s"}] * 2
    assert rows[0]["steps"] == 40 and rows[0]["hang_timeout_s"] == 600.0  # the floor: 10 minutes
    assert rows[1]["hang_timeout_s"] is None


def test_relaunch_progress_says_why_it_sees_no_progress():
    result = CliRunner().invoke(app, ["progress", str(FIXTURES / "lightning_rich.log")])
    assert result.exit_code == 0
    assert "Rich progress bar" in result.output and "LightningProgressCallback" in result.output


def test_relaunch_progress_exits_2_on_an_unreadable_file(tmp_path):
    assert CliRunner().invoke(app, ["progress", str(tmp_path / "missing.log")]).exit_code == 2


def test_after_the_last_step_of_a_run_the_tail_gets_the_save_allowance_not_the_step_timeout():
    """A real HF run: after step 40 of 40 the Trainer's wind-down (and a slow teardown) is no hang."""
    from relaunch.detector.domain import hangs
    from relaunch.detector.domain.reference_track import advance as _advance

    frames = [f" {i * 2:d}%|█         | {i}/40 [00:0{i % 10}<00:10,  4.00it/s]" for i in range(1, 41)]
    from relaunch.common.progress.parsing import parse_line

    current, midway = None, None
    for i, frame in enumerate(frames):
        hang, strag = _advance(current, 0, [parse_line(frame)], 1000.0 + i)
        current = (0, hang, strag)
        midway = hang if i == 20 else midway
    policy = hangs.HangPolicy()
    assert hangs.deadline(midway, policy) == 1000.0 + 20 + policy.floor_s  # the step rhythm mid-run
    assert hangs.deadline(current[1], policy) >= 1000.0 + 39 + policy.checkpoint_s


def test_a_process_that_reported_progress_exits_at_once():
    """Seen in the real-framework tier: the SDK's thread, blocked in queue.get() in an executor thread,
    kept a finished HF training from exiting (the interpreter joins executor threads at exit), and
    relaunch declared the healthy job hung."""
    import subprocess
    import sys

    code = ("import os, time; os.environ['SLURM_JOB_ID'] = '1'; os.environ['RELAUNCH_NATS_URL'] = "
            "'nats://127.0.0.1:1'\nfrom relaunch.client import report_progress\nreport_progress(1)\n"
            "time.sleep(0.5)\nprint('done')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "done" in out.stdout
    assert "Traceback" not in out.stderr, out.stderr
