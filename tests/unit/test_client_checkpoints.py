"""relaunch.client says a checkpoint was saved (docs/goodput.md): report_checkpoint, and HF Trainer's
callback once the Trainer has written one (transformers stood in for by a module with TrainerCallback)."""

from __future__ import annotations

import sys
import types

from relaunch.client import callbacks, progress


def test_report_checkpoint_is_a_progress_report_that_says_saved(monkeypatch):
    calls = []
    monkeypatch.setattr(progress, "report_progress", lambda step, **kw: calls.append((step, kw)))
    progress.report_checkpoint(1200)
    assert calls == [(1200, {"checkpoint_saved": True})]


def test_the_reporter_puts_checkpoint_saved_on_the_record():
    reporter = object.__new__(progress.ProgressReporter)
    reporter.cluster, reporter.job_id, reporter.node, reporter.key, reporter.dropped = "c", "7", None, "k", 0
    import queue
    reporter._queue = queue.Queue()
    reporter.report(10, checkpoint_saved=True)
    reporter.report(11)
    first, second = reporter._queue.get_nowait(), reporter._queue.get_nowait()
    assert first.checkpoint_saved is True and second.checkpoint_saved is None


def test_hf_callback_reports_a_save_on_rank_zero_only(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", types.SimpleNamespace(TrainerCallback=object))
    calls = []
    callback = callbacks.HFProgressCallback(report=lambda step, **kw: calls.append((step, kw)))
    state = types.SimpleNamespace(is_world_process_zero=True, global_step=500)
    callback.on_save(None, state, None)
    callback.on_save(None, types.SimpleNamespace(is_world_process_zero=False, global_step=500), None)
    assert calls == [(500, {"checkpoint_saved": True})]
