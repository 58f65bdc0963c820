"""A healthy pause is no hang (issue 37, item 0): a plain job printing a step a second pauses for an
evaluation three times as long as the test stack's hang floor, twice, and relaunch neither declares
anything nor restarts it."""

from __future__ import annotations

import pytest
from slurmjobs import job_fields, ledger, sbatch, wait_for_the_actuator_to_lead, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=76)]

FLOOR_S = 10.0
"""The test stack's hang floor (tests/conftest.py: RELAUNCH_DETECTOR_HANG_FLOOR_S)."""


def test_a_job_pausing_three_times_the_floor_for_evaluation_is_left_alone(services):
    wait_for_the_actuator_to_lead(services)
    job = sbatch(services, "eval-pause.sh", "relaunch", STEPS="14", STEP_SECONDS="1", EVAL_EVERY="5",
                 EVAL_SECONDS=str(int(3 * FLOOR_S)))
    wait_until("the job to complete", lambda: job_fields(job)["JobState"] in ("COMPLETED", "FAILED", "CANCELLED"),
               timeout=14 + 2 * 3 * FLOOR_S + 60)
    record = ledger(job)
    assert job_fields(job)["JobState"] == "COMPLETED" and job_fields(job)["Restarts"] == "0"
    assert record.get("anomalies") == [], record.get("anomalies")
    assert record.get("advice") == []
    assert not record.get("hang_evidence"), record.get("hang_evidence")  # nothing read from outside (issue 37)
