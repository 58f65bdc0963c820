"""Hangs and stragglers, end to end on real Slurm with every service running."""

from __future__ import annotations

import time

import pytest
from slurmjobs import job_fields, ledger, sbatch, wait_for_the_actuator_to_lead, wait_until

pytestmark = pytest.mark.e2e


def test_a_job_that_stops_printing_iterations_is_restarted_as_hung(services):
    started = time.monotonic()
    wait_for_the_actuator_to_lead(services)
    job = sbatch(services, "megatron-like.sh", "relaunch:max_attempts=2", STEPS="8", STEP_SECONDS="1",
                 HANG_AFTER="6")
    record = wait_until("the hang to be detected and the job restarted",
                        lambda: (r := ledger(job)) and r["advice"] and r["advice"][0]["status"] == "CONVERGED" and r,
                        timeout=60)
    (anomaly,) = record["anomalies"]
    assert anomaly["kind"] == "hang" and anomaly["attempt"] == 0 and "since step 6" in anomaly["summary"]
    hang_detected_after = time.monotonic() - started
    # 6 one-second steps, then no progress: declared within the 10 s floor plus sweep and follow delays.
    assert hang_detected_after < 6 + 3 + 15 + 5, hang_detected_after
    wait_until("the second attempt to complete", lambda: job_fields(job)["JobState"] == "COMPLETED", timeout=40)
    assert job_fields(job)["Restarts"] == "1"


def test_a_hung_job_out_of_attempts_is_cancelled_not_left_holding_its_nodes(services):
    wait_for_the_actuator_to_lead(services)
    job = sbatch(services, "megatron-like.sh", "relaunch:max_attempts=1", STEPS="8", STEP_SECONDS="1",
                 HANG_AFTER="4")
    record = wait_until("the hung job to be cancelled",
                        lambda: (r := ledger(job)) and r["advice"] and r["advice"][0]["status"] == "CONVERGED" and r,
                        timeout=60)
    (advice,) = record["advice"]
    assert advice["operation"] == "terminate" and "max_attempts=1" in advice["reason"], advice
    assert "cancelled to release its nodes" in advice["reason"]
    wait_until("Slurm to end the job", lambda: job_fields(job)["JobState"] == "CANCELLED", timeout=30)
    assert job_fields(job)["Restarts"] == "0", "cancelled, never restarted"


def test_a_throughput_drop_is_a_straggler_restarted_only_when_opted_in(services):
    common = dict(STEPS="40", STEP_SECONDS="0.1", SLOW_AFTER="20", SLOW_PERCENT="60", TAIL_SECONDS="5")  # under the 10 s hang floor
    opted = sbatch(services, "megatron-like.sh", "relaunch:max_attempts=2,straggler=on", **common)
    report_only = sbatch(services, "megatron-like.sh", "relaunch:max_attempts=2", **common)

    record = wait_until("the opted-in straggler to be restarted",
                        lambda: (r := ledger(opted)) and r["advice"] and r["advice"][0]["status"] == "CONVERGED" and r,
                        timeout=60)
    assert [a["kind"] for a in record["anomalies"]] == ["straggler"]
    assert "below the baseline" in record["anomalies"][0]["summary"]

    record = wait_until("the other straggler to be reported",
                        lambda: (r := ledger(report_only)) and r["anomalies"] and any(
                            a["action"] == "report" for a in r["audit"]) and r, timeout=60)
    assert record["anomalies"][0]["kind"] == "straggler" and record["advice"] == []
    wait_until("both jobs to complete", lambda: all(job_fields(j)["JobState"] == "COMPLETED"
                                                    for j in (opted, report_only)), timeout=60)
    assert job_fields(opted)["Restarts"] == "1" and job_fields(report_only)["Restarts"] == "0"
