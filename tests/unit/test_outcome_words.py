"""A job's outcome in one sentence (relaunch.common.outcome_words; issue 40, item 4): what `relaunch jobs`
prints and the job page leads with."""

from __future__ import annotations

import pytest

from relaunch.common.outcome_words import cause_words, outcome

MODULE_ERROR = [{"text": '  File "/home/alice/run/train.py", line 3, in <module>'},
                {"text": "ModuleNotFoundError: No module named 'apex'"}]


def failure(attempt, category, kind="crash", evidence=()):
    return {"attempt": attempt, "kind": kind, "category": category, "summary": "", "evidence": list(evidence)}


@pytest.mark.parametrize("job, anomalies, sentence", [
    ({"state": "RUNNING", "verdict": "watching", "restarts": 0}, [], "running"),
    ({"state": "COMPLETED", "verdict": "watching", "restarts": 0}, [], "completed"),
    ({"state": "PENDING", "verdict": "watching", "restarts": 0}, [], "waiting in the queue"),
    ({"state": "RUNNING", "verdict": "watching", "restarts": 1}, [failure(0, "segfault")],
     "recovered after segfault, 1 restart; running"),
    ({"state": "COMPLETED", "verdict": "watching", "restarts": 2},
     [failure(0, "segfault"), failure(0, "teardown"), failure(1, "hang", kind="hang")],
     "recovered after segfault and a hang (no progress), 2 restarts; completed"),
    ({"state": "FAILED", "verdict": "stopped", "restarts": 0}, [failure(0, "user_code_error", evidence=MODULE_ERROR)],
     "stopped: ModuleNotFoundError in train.py"),
    ({"state": "FAILED", "verdict": "stopped", "restarts": 2}, [failure(0, "cuda_oom")] * 3,
     "stopped: CUDA out of memory after 2 restarts"),
    ({"state": "CANCELLED", "verdict": "stopped", "restarts": 0,
      "verdict_reason": "cancelled by relaunch (advice generation 1): ..."}, [failure(0, "hang", kind="hang")],
     "cancelled by relaunch: a hang (no progress)"),
    ({"state": "FAILED", "verdict": "stopped", "restarts": 0,
      "verdict_reason": "max_attempts=1 reached: attempt 1 of 1 failed (segfault)"}, [failure(0, "segfault")],
     "stopped: segfault (max_attempts=1 reached)"),
    ({"state": "FAILED", "verdict": "stopped", "restarts": 1,
      "verdict_reason": "cuda_oom is a resource fault and policy 'default' allows 0 resource restart(s) per job"},
     [failure(0, "cuda_oom")], "stopped: CUDA out of memory after 1 restart (no resource restarts left)"),
    ({"state": "CANCELLED", "verdict": "stopped", "restarts": 1},
     [failure(0, "segfault"), failure(1, "slurm_cancelled")], "cancelled by its user after 1 restart"),
    ({"state": "RUNNING", "verdict": "recovering", "restarts": 0}, [failure(0, "nccl_network_error")],
     "recovering from NCCL network error"),
    ({"state": "FAILED", "verdict": "observing", "restarts": 0, "mode": "observe"}, [failure(0, "segfault")],
     "not restarted (observe-only): segfault"),
    ({"state": "RUNNING", "verdict": "watching", "restarts": 0, "mode": "act", "mode_override": "observe"}, [],
     "running (observe-only)"),
    ({"state": "RUNNING", "verdict": "watching", "restarts": 0},
     [failure(0, "straggler", kind="straggler")], "running"),
])
def test_the_outcome_in_words(job, anomalies, sentence):
    assert outcome(job, anomalies) == sentence


def test_a_completed_job_never_reads_watching():
    assert "watching" not in outcome({"state": "COMPLETED", "verdict": "watching", "restarts": 0})


def test_only_an_exception_name_and_a_file_name_are_taken_from_the_log():
    hostile = [{"text": 'File "/x/\x1b[2J.py" ' + "A" * 10_000}, {"text": "EvilError: rm -rf / " + "B" * 10_000}]
    assert cause_words(failure(0, "user_code_error", evidence=hostile)) == "EvilError"
    # an NCCL error raised as RuntimeError says NCCL, not RuntimeError
    assert cause_words(failure(0, "nccl_error", evidence=[{"text": "RuntimeError: NCCL error"}])) == "NCCL error"
