"""Slurm's accounting of an attempt's batch step tells a launch Slurm refused from a script that ran
(services/actuator/.../domain/launches.py). The sacct lines are those 22.05.8 printed on the local stack
(`sacct -j J -D -P -n --format=JobIDRaw,State,ExitCode,Submit`, times in this host's local time)."""

import datetime as dt
import json
from pathlib import Path

import pytest

from relaunch.actuator.domain.launches import BatchStep, batch_step_from_rest, batch_step_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurmrest"


def local(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).astimezone(dt.UTC)  # sacct's naive times are this host's local time


# Job 6: restart 0 requeued while running; slurmd refused restart 1 ("Job 6 already killed, do not launch
# batch job"; slurmctld: "Killing non-startable batch JobId=6: Job credential revoked").
REFUSED = """6|REQUEUED|0:0|2026-12-04T22:17:40
6.batch|CANCELLED|0:15|2026-12-04T22:17:41
6|FAILED|1:0|2026-12-04T22:17:45
6.batch|CANCELLED||2026-12-04T22:17:45
"""
# Job 2: a script that printed a line and exited 1 at once, restarted in the second of its requeue.
FAST_FAILURE = """2|REQUEUED|1:0|2026-12-04T22:16:11
2.batch|FAILED|1:0|2026-12-04T22:16:11
2|FAILED|1:0|2026-12-04T22:16:14
2.batch|FAILED|1:0|2026-12-04T22:16:14
"""


def test_a_refused_launch_leaves_a_batch_step_slurmctld_closed_itself():
    step = batch_step_of(REFUSED, "6", local("2026-12-04T22:17:45"))
    assert step == BatchStep("CANCELLED", "") and step.never_ran


def test_a_script_that_failed_at_once_leaves_its_exit_code_on_its_batch_step():
    step = batch_step_of(FAST_FAILURE, "2", local("2026-12-04T22:16:14"))
    assert step == BatchStep("FAILED", "1:0") and not step.never_ran


def test_the_batch_step_is_the_attempts_own_and_none_when_accounting_has_none_yet():
    # The requeued attempt's step (cancelled by the requeue, with its signal) is not the successor's.
    assert batch_step_of(REFUSED, "6", local("2026-12-04T22:17:40")) == BatchStep("CANCELLED", "0:15")
    assert not BatchStep("CANCELLED", "0:15").never_ran
    assert batch_step_of("6|FAILED|1:0|2026-12-04T22:17:45\n", "6", local("2026-12-04T22:17:45")) is None
    assert batch_step_of(REFUSED, "6", local("2026-12-04T22:17:50")) is None
    assert batch_step_of(REFUSED.replace("6", "16"), "6", local("2026-12-04T22:17:45")) is None


def rest_answer(step_state: list[str], exit_code: dict) -> dict:
    submitted = int(dt.datetime(2026, 12, 4, 22, 17, 45, tzinfo=dt.UTC).timestamp())
    return {"jobs": [{"job_id": 6, "time": {"submission": submitted},
                      "steps": [{"step": {"id": "6.batch", "name": "batch"}, "state": step_state,
                                 "exit_code": exit_code}]}]}


@pytest.mark.parametrize(("state", "code", "never_ran"), [
    (["CANCELLED"], {"status": ["PENDING"], "return_code": {"set": False, "infinite": False, "number": 0}}, True),
    (["FAILED"], {"status": ["ERROR"], "return_code": {"set": True, "infinite": False, "number": 1},
                  "signal": {"id": {"set": False, "infinite": False, "number": 0}}}, False),
])
def test_slurmdbd_through_slurmrestd_says_the_same(state, code, never_ran):
    at = dt.datetime(2026, 12, 4, 22, 17, 45, tzinfo=dt.UTC)
    step = batch_step_from_rest(rest_answer(state, code), "6", at)
    assert step is not None and step.never_ran is never_ran
    assert batch_step_from_rest(rest_answer(state, code), "6", at + dt.timedelta(seconds=1)) is None
    assert batch_step_from_rest({"jobs": [{"job_id": 6, "steps": "?"}]}, "6", at) is None


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_a_recorded_slurmdbd_answer_reads_as_a_script_that_ran(release):
    # tests/fixtures/slurmrest/<release>/slurmdb-job.json: a script that exited 3, as slurmrestd printed it.
    answer = json.loads((FIXTURES / release / "slurmdb-job.json").read_text())
    job = answer["jobs"][0]
    at = dt.datetime.fromtimestamp(job["time"]["submission"], dt.UTC)
    assert batch_step_from_rest(answer, str(job["job_id"]), at) == BatchStep("FAILED", "3:0")
