import random
import time

import pytest

from relaunch.detector.domain.progress import MAX_LINE, PRESETS, CheckpointMark, ProgressPoint, parse_line

MEGATRON = (" [2025-03-02 10:14:07] iteration      100/  500000 | consumed samples:        51200 | elapsed time per "
            "iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 180.3 | learning rate: 1.000000E-04 | "
            "global batch size:   512 | lm loss: 7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |")
MEGATRON_DS = ("iteration      199/  317892 | consumed samples:       152832 | consumed tokens:    625999872 | "
               "elapsed time per iteration (ms): 2950.1 | learning rate: 2.998E-05 | global batch size:   768 | "
               "lm loss: 7.806641E+00 | loss scale: 4096.0 | grad norm: 2.113 | actual seqlen:  4096 | number of "
               "skipped iterations:   0 | number of nan iterations:   0 | samples per second: 260.331 | "
               "TFLOPs: 152.11 |")
NEMO2 = ("[NeMo I 2025-06-18 16:40:11 nemo_logging:393] Training epoch 0, iteration 9/99 | lr: 1.499e-05 | "
         "global_batch_size: 8 | global_step: 9 | reduced_train_loss: 7.262 | train_step_timing in s: 0.4381 | "
         "consumed_samples: 80")
NEMO1 = ("Epoch 0: : 100%|██████████| 100/100 [10:48<00:00, reduced_train_loss=0.0172, global_step=99.00, "
         "consumed_samples=25600.0, train_step_timing in s=3.130]")
TITAN = ("[rank0]:[titan] 2025-04-01 00:25:47,084 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  9.5000  "
         "\x1b[33mmemory: 12.34GiB(15.62%)  \x1b[34mtps: 1,234  \x1b[36mtflops: 56.78  \x1b[35mmfu: 12.34%\x1b[39m")


@pytest.mark.parametrize("line, expected", [
    (MEGATRON, ProgressPoint(100, 180.3, 1.2345, None, "megatron")),
    (MEGATRON_DS, ProgressPoint(199, 260.331, 2.9501, None, "megatron")),
    ("[default7]: iteration      20/     100 | consumed samples:          640 | elapsed time per iteration (ms): "
     "812.0 | learning rate: 3.0E-04 |", ProgressPoint(20, None, 0.812, 7, "megatron")),
    (NEMO2, ProgressPoint(9, None, 0.4381, None, "nemo")),
    (NEMO1, ProgressPoint(99, None, 3.13, None, "nemo")),
    ("Epoch 0:  12%|█▏        | 1200/10000 [08:00<58:40,  2.50it/s, v_num=0, loss=2.34]",
     ProgressPoint(1200, 2.5, 0.4, None, "lightning")),
    ("Epoch 2:  12%|█▏        | 1200/10000 [08:00<58:40,  4.00s/it, v_num=0, loss=2.34]",
     ProgressPoint(21200, 0.25, 4.0, None, "lightning")),
    ("Epoch 3: |          | 57/? [00:10<00:00,  5.00it/s, v_num=1]", ProgressPoint(57, 5.0, 0.2, None, "lightning")),
    ("{'train_loss': 2.31, 'global_step': 300, 'epoch': 1}", ProgressPoint(300, None, None, None, "lightning")),
    ("{'loss': 1.2345, 'grad_norm': 0.51, 'learning_rate': 4.9e-05, 'epoch': 0.05}",
     ProgressPoint(None, None, None, None, "hf_trainer")),
    ("  5%|▌         | 50/1000 [00:20<06:20,  2.50it/s]", ProgressPoint(50, 2.5, 0.4, None, "hf_trainer")),
    (TITAN, ProgressPoint(10, 1234.0, None, 0, "torchtitan")),
    ("[rank3]:[titan] 2025-04-01 00:25:47,084 - root - INFO - step: 11  loss:  9.1000  memory: 12.34GiB(15.62%)  "
     "wps: 987  mfu: 12.34%", ProgressPoint(11, 987.0, None, 3, "torchtitan")),
    ("[2023-10-31 08:58:33,237] [INFO] [logging.py:96:log_dist] [Rank 0] step=14000, skipped=25, lr=[0.001], "
     "mom=[0.9]", ProgressPoint(14000, None, None, 0, "deepspeed")),
    ("[2023-10-31 08:58:33,237] [INFO] [timer.py:260:stop] epoch=0/micro_step=14000/global_step=14000, "
     "RunningAvgSamplesPerSec=1412.76, CurrSamplesPerSec=1322.81, MemAllocated=0.0GB, MaxMemAllocated=0.0GB",
     ProgressPoint(14000, 1322.81, None, None, "deepspeed")),
    ("steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 62.500",
     ProgressPoint(100, 62.5, 0.512, None, "deepspeed")),
    ("step:   300 /  1000 loss: 2.1000 iter time (s): 0.500 samples/sec: 64.000 eta: 00:05:50 ",
     ProgressPoint(300, 64.0, 0.5, None, "deepspeed")),
])
def test_each_preset_reads_its_framework_lines(line, expected):
    assert parse_line(line) == expected
    assert parse_line(line, preset=expected.preset) == expected


@pytest.mark.parametrize("line, phase, step, preset", [
    ("saving checkpoint at iteration     100 to /ckpt/gpt in torch_dist format", "started", 100, "megatron"),
    ("  successfully saved checkpoint from iteration     100 to /ckpt/gpt [ t 1/8, p 1/1 ]", "finished", 100,
     "megatron"),
    ("[NeMo I 2026-02-17 17:58:41 nemo_logging:393] Scheduled async checkpoint save for /ckpt/step=24.ckpt",
     "started", 24, "nemo"),
    ("[NeMo I 2025-05-15 23:42:54 nemo_logging:393] Async checkpoint save for step 50 "
     "(/c/epoch=0-val_loss=3.11-step=49-consumed_samples=200.0.ckpt) finalized successfully.", "finished", 50, "nemo"),
    ("Saving model checkpoint to out/checkpoint-500", "started", 500, "hf_trainer"),
    ("Deleting older checkpoint [out/checkpoint-400] due to args.save_total_limit", "finished", None, "hf_trainer"),
    ("[rank0]:[titan] 2025-04-01 00:25:40,000 - root - INFO - Saving the checkpoint (or staging if async is "
     "enabled).", "started", None, "torchtitan"),
    ("[rank0]:[titan] 2025-04-01 00:25:59,616 - root - INFO - Finished saving the checkpoint (or staging if async "
     "is enabled)in 5.53 seconds.", "finished", None, "torchtitan"),
    ("[titan] Saving a model only checkpoint in torch.bfloat16 at last step, step 10.", "started", 10, "torchtitan"),
    ("[2023-07-24 13:21:33,261] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step10 is about "
     "to be saved!", "started", 10, "deepspeed"),
    ("[2023-07-24 13:21:40,001] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step10 is "
     "ready now!", "finished", 10, "deepspeed"),
    ("Epoch 0, global step 500: 'val_loss' reached 2.34000 (best 2.34000), saving model to "
     "'/ckpt/epoch=0-step=500.ckpt' as top 1", "started", 500, "lightning"),
])
def test_checkpoint_saves_are_recognised_whatever_the_preset(line, phase, step, preset):
    mark = parse_line(line, preset="megatron" if preset != "megatron" else "hf_trainer")
    assert mark == CheckpointMark(phase, step, mark.rank, preset)


def test_a_rank_prefix_is_read_from_the_launchers_label():
    assert parse_line("3: " + MEGATRON.strip()).rank == 3
    assert parse_line("[rank12]: saving checkpoint at iteration 5 to /c").rank == 12


@pytest.mark.parametrize("line", [
    "",
    "NCCL INFO Channel 00/32 :    0   1   2   3",
    "Map: 100%|██████████| 1000/1000 [00:00<00:00, 12345.67 examples/s]",
    "Loading checkpoint shards: 100%|██████████| 4/4 [00:05<00:00,  1.30s/it]",
    "{'train_runtime': 123.4, 'train_samples_per_second': 8.1, 'train_loss': 2.3, 'epoch': 3.0}",
    "step 5, loss: 2.5",
])
def test_other_lines_are_not_progress(line):
    # (evaluation lines are pauses: tests/unit/test_pauses.py)
    assert parse_line(line) is None


def test_a_preset_given_explicitly_reads_only_its_own_format():
    assert parse_line(MEGATRON, preset="torchtitan") is None
    assert parse_line(TITAN, preset="torchtitan").step == 10
    with pytest.raises(ValueError, match="unknown progress preset"):
        parse_line(MEGATRON, preset="fairseq")


def test_the_last_tqdm_refresh_in_a_carriage_return_line_is_the_current_state():
    refreshes = "\r".join(f"  {i // 10}%|▌  | {i}/1000 [00:{i // 3:02d}<06:20,  3.00it/s]" for i in range(1, 200))
    assert parse_line(refreshes + "\r\n").step == 199
    assert parse_line(refreshes.encode()).step == 199


def test_bytes_with_invalid_utf8_are_parsed_or_ignored_never_raised():
    assert parse_line(b"\xff\xfe iteration 7/ 10 | consumed samples: 1 | elapsed time per iteration (ms): 9.0 |"
                      ).step == 7
    assert parse_line(b"\x80\x81\x00\xc3(") is None


def test_a_line_is_cut_at_max_line_characters():
    assert parse_line("x" * MAX_LINE + MEGATRON) is None
    assert parse_line(MEGATRON + "x" * (10 * MAX_LINE)).step == 100


HOSTILE = [
    "a" * 10_000_000,
    " " * 10_000_000,
    "iteration " * 1_000_000,
    "iteration 1" + " " * 9_999_000 + "/",
    "Epoch 1:" + "|" * 5_000_000 + " " * 5_000_000,
    "  5%|" + " " * 10_000_000,
    "step: 1 " + " " * 10_000_000 + "loss:",
    "checkpoint " * 1_000_000,
    "global step 1: " + "x" * 10_000_000,
    "{'loss': " + "1" * 10_000_000,
    "\r" * 5_000_000 + "x" * 5_000_000,
    "\x1b[" * 5_000_000,
]


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_hostile_lines_take_bounded_time(preset):
    rng = random.Random(7)
    junk = bytes(rng.randrange(256) for _ in range(1 << 20)) * 10  # 10 MB of binary junk
    for line in [*HOSTILE, junk, junk.decode("latin-1")]:
        started = time.perf_counter()
        parse_line(line, preset)
        # Linear work on 10 MB is ~0.1 s; backtracking would take minutes. The bound is loose so a busy
        # CI machine does not fail it.
        assert time.perf_counter() - started < 2.0, repr(line[:40])
