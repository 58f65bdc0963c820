"""Checkpoint facts from what the detector reads (docs/goodput.md): the frameworks' save lines, an
attempt's first step, relaunch.client's checkpoint reports, a failure's last progress and catching up."""

from __future__ import annotations

import asyncio
import datetime as dt

from test_one_verdict import T0, HotStateInMemory, Published

from relaunch.common.progress.parsing import parse_line
from relaunch.common.schemas import AnomalyDetected, LogBatch
from relaunch.detector.anomalies import AnomalyPublisher
from relaunch.detector.domain import checkpoints, hangs, stragglers
from relaunch.detector.domain.lost_nodes import Progress
from relaunch.detector.tracking import ProgressTracker

MEGATRON = [
    " [2026-12-01 12:00:00] iteration      998/  100000 | consumed samples: 1 | elapsed time per iteration (ms): 980.1 |"
    " learning rate: 1.0E-04 | global batch size: 8 | lm loss: 2.1E+00 | loss scale: 1.0 | grad norm: 1.0 |",
    " [2026-12-01 12:00:01] iteration     1000/  100000 | consumed samples: 1 | elapsed time per iteration (ms): 980.1 |"
    " learning rate: 1.0E-04 | global batch size: 8 | lm loss: 2.1E+00 | loss scale: 1.0 | grad norm: 1.0 |",
    "saving checkpoint at iteration    1000 to /ckpt in torch_dist format",
    "  successfully saved checkpoint from iteration    1000 to /ckpt [ t 1/1, p 1/1 ]",
]


def marks(lines):
    return [m for m in map(parse_line, lines) if m is not None]


def test_megatron_lines_give_the_first_step_and_a_save_with_its_step():
    facts = checkpoints.from_marks("c", "7", 0, marks(MEGATRON), T0, None, None)
    assert [(f.kind, f.step, f.preset) for f in facts] == [
        ("first_step", 998, "megatron"), ("save_started", 1000, "megatron"), ("saved", 1000, "megatron")]


def test_a_save_line_without_a_step_holds_the_step_reached_and_evaluations_are_no_saves():
    lines = ["{'loss': 1.0, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.1}",
             " 40%|████      | 40/100 [00:10<00:15,  4.00it/s]",
             "Saving model checkpoint to out/checkpoint-40",
             "***** Running Evaluation *****"]
    facts = checkpoints.from_marks("c", "7", 2, marks(lines), T0, 12, None)
    assert [(f.kind, f.step) for f in facts] == [("save_started", 40)]  # not a first step: 12 was reached before
    torchtitan = ["Saving the checkpoint (or staging if async is enabled)."]
    assert [(f.kind, f.step) for f in checkpoints.from_marks("c", "7", 0, marks(torchtitan), T0, 300, None)] == [
        ("save_started", 300)]


def test_catching_up_is_said_once_when_the_attempt_passes_the_failed_step():
    facts = checkpoints.from_marks("c", "7", 1, marks(MEGATRON[:2]), T0, None, 999)
    assert [(f.kind, f.step) for f in facts] == [("first_step", 998), ("caught_up", 1000)]
    assert checkpoints.from_marks("c", "7", 1, marks(MEGATRON[:2]), T0, 1000, 999) == []  # passed before


def test_client_reports_give_first_step_saves_and_catching_up():
    reports = [(5, T0, False), (6, T0, True), (7, T0, False)]
    facts = checkpoints.from_reports("c", "7", 1, reports, None, 7)
    assert [(f.kind, f.step, f.source) for f in facts] == [
        ("first_step", 5, "client"), ("saved", 6, "client"), ("caught_up", 7, "client")]


def test_identities_depend_on_what_the_fact_says():
    a, b = checkpoints.from_marks("c", "7", 0, marks(MEGATRON[2:4] * 2), T0, 1000, None)[:2]
    again = checkpoints.from_marks("c", "7", 0, marks(MEGATRON[2:4]), T0 + dt.timedelta(seconds=9), 1000, None)
    assert [checkpoints.msg_id(f) for f in again] == [checkpoints.msg_id(a), checkpoints.msg_id(b)]
    assert checkpoints.msg_id(a) == "checkpoint.c.7.0.save_started.1000"


def test_catch_up_values_are_per_attempt():
    assert checkpoints.catch_up_target(checkpoints.catch_up_value(3, 1200), 3) == 1200
    assert checkpoints.catch_up_target(b"3:1200", 3) == 1200
    assert checkpoints.catch_up_target("3:1200", 4) is None
    assert checkpoints.catch_up_target("junk", 3) is None and checkpoints.catch_up_target(None, 3) is None


class _Bus:
    def __init__(self) -> None:
        self.sent: list[tuple[str, object, str | None]] = []

    async def publish(self, subject, model, msg_id=None):
        self.sent.append((subject, model, msg_id))
        return True


class _State(HotStateInMemory):
    async def note(self, cluster, job_id, name, value):
        self.jobs.setdefault((cluster, job_id), {})[name] = value


def test_the_tracker_publishes_the_facts_of_a_log_batch_once_per_rank_line():
    bus, state = _Bus(), _State()
    state.jobs[("c", "7")] = {"attempt": "1", "catch_up": "1:999"}
    tracker = ProgressTracker(bus, state, "c", hangs.HangPolicy(), stragglers.StragglerPolicy(),
                              anomalies=Published(state))
    lines = MEGATRON + MEGATRON[2:]  # a second rank's save lines
    asyncio.run(tracker.on_batch(LogBatch(cluster="c", job_id="7", attempt=1, path="/x", offset=0, lines=lines,
                                          read_at=T0)))
    assert [(s, m.kind, m.step) for s, m, _ in bus.sent] == [
        ("relaunch.event.checkpoint.c.7", "first_step", 998), ("relaunch.event.checkpoint.c.7", "caught_up", 1000),
        ("relaunch.event.checkpoint.c.7", "save_started", 1000), ("relaunch.event.checkpoint.c.7", "saved", 1000)]


def test_a_failure_publishes_the_last_progress_and_the_step_to_catch_up_to():
    bus, state = _Bus(), _State()
    publisher = AnomalyPublisher(bus, state)

    async def progress(job_id, attempt):
        return Progress(T0.timestamp(), 1300)

    publisher.progress = progress
    anomaly = AnomalyDetected(anomaly_id="c.7.0.crash", cluster="c", job_id="7", attempt=0, kind="crash", source="log",
                              signature_id="x", category="segfault", fault_domain="unknown", action="restart",
                              summary="s", detected_at=T0 + dt.timedelta(seconds=3), last_step=1300)
    asyncio.run(publisher.publish(anomaly, T0))
    facts = [m for _, m, _ in bus.sent if not isinstance(m, AnomalyDetected)]
    assert [(f.kind, f.step, f.at) for f in facts] == [("last_progress", 1300, T0)]
    assert state.jobs[("c", "7")]["catch_up"] == "1:1300"
    straggler = anomaly.model_copy(update={"anomaly_id": "c.7.0.straggler", "kind": "straggler"})
    bus.sent.clear()
    asyncio.run(publisher.publish(straggler, T0))
    assert [type(m).__name__ for _, m, _ in bus.sent] == ["AnomalyDetected"]  # a slow run is no failure


LOADS = [
    (" successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 1000", 1000, "megatron"),
    ("  successfully loaded checkpoint from /ckpt at iteration 20", 20, "megatron"),
    ("[INFO|trainer.py:2400] 2026-12-01 >>   Continuing training from global step 500", 500, "hf_trainer"),
    ("Restoring states from the checkpoint path at /x/lightning_logs/version_0/epoch=0-step=500.ckpt", 500,
     "lightning"),
    ("[titan] 2026-12-01 12:00:00,000 - root - INFO - Loading the checkpoint from ./outputs/checkpoint/step-500.", 500,
     "torchtitan"),
    ("[INFO] [engine.py:3000:_load_checkpoint] Loading checkpoint: /ck/global_step300/mp_rank_00_model_states.pt",
     300, "deepspeed"),
    ("Restoring states from the checkpoint path at /x/last.ckpt", None, "lightning"),
]


def test_load_lines_name_the_step_resumed_from():
    from relaunch.common.progress.loads import loaded

    for line, step, preset in LOADS:
        found = loaded(line)
        assert found is not None and (found.step, found.preset) == (step, preset), line
    for line in ("Loading checkpoint shards: 100%|██████████| 2/2 [00:01<00:00,  1.50it/s]", "loading data",
                 "saving checkpoint at iteration    1000 to /ckpt in torch_dist format", "x" * 100_000,
                 b"\xff\xfe successfully loaded checkpoint from /c at iteration 7"):
        assert loaded(line) is None or loaded(line).step == 7, line


def test_a_batchs_load_line_is_a_loaded_fact_and_no_progress():
    marks, loads = checkpoints.read_lines([LOADS[0][0], MEGATRON[1]])
    assert len(marks) == 1 and [x.step for x in loads] == [1000]
    facts = checkpoints.from_marks("c", "7", 1, marks, T0, None, None, loads=loads)
    assert [(f.kind, f.step) for f in facts] == [("loaded", 1000), ("first_step", 1000)]
    assert checkpoints.msg_id(facts[0]) == "checkpoint.c.7.1.loaded.1000"
