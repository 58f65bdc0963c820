"""bench/recovery_latency.py and bench/restart_matrix.py: the restart target as ratios, and the
matrix table (issue 21's restart figure, printed against its target)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import recovery_latency  # noqa: E402 - the bench script itself
import restart_matrix  # noqa: E402


def test_the_target_is_met_only_with_both_figures_under_and_twenty_recoveries():
    met = recovery_latency.restart_target({"n": 20, "median": 1.09, "p95": 1.14})
    assert met["met"] and met["ratios"] == {"median": 0.78, "p95": 0.57}
    assert "met" in met["line"] and "0.78x the 1.4 s target" in met["line"]
    assert not recovery_latency.restart_target({"n": 20, "median": 1.5, "p95": 1.6})["met"]
    assert not recovery_latency.restart_target({"n": 20, "median": 1.0, "p95": 2.1})["met"]
    assert not recovery_latency.restart_target({"n": 19, "median": 1.0, "p95": 1.1})["met"]


def test_the_matrix_table_names_the_setting_and_the_native_requeue():
    row = {"slurm": "26.05.5", "setting": "default", "scheduler_parameters": "",
           "failure_to_running_s": {"n": 20, "median": 3.5, "p95": 3.9}, "baseline_plain_requeue_s": 142.0,
           "speedup_median_vs_plain_requeue": 40.6, "first_recovery_on_a_fresh_stack_s": 3.09,
           "restart_target": recovery_latency.restart_target({"n": 20, "median": 3.5, "p95": 3.9})}
    failed = {"setting": "batch_sched_delay=0", "error": "stack.sh: no Slurm root"}
    text = restart_matrix.table([row, failed])
    assert "| 26.05.5 | (default: batch_sched_delay=3) | 3.50 s | 3.90 s | 2.50x / 1.95x | 142 s | 40.6x | no | 3.09 s |" in text
    assert "did not run: stack.sh: no Slurm root" in text
