import datetime as dt

import pytest

from relaunch.actuator.domain.hostlists import expand
from relaunch.actuator.domain.observing import opted_in_jobs, parse_scontrol_line
from relaunch.actuator.domain.rest_values import observed_from_rest
from relaunch.actuator.domain.slurm_values import exit_code

# A real line from Slurm 22.05.8 (scontrol show job -o), after requeuehold.
HELD = ("JobId=1 JobName=job.sh UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 Nice=0 Account=(null) "
        "QOS=(null) JobState=PENDING Reason=job_requeued_in_held_state Dependency=(null) Requeue=1 Restarts=1 "
        "BatchFlag=1 Reboot=0 ExitCode=1:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
        "SubmitTime=2026-11-29T15:27:01 EligibleTime=2026-11-29T15:29:11 AccrueTime=Unknown "
        "StartTime=2026-11-29T15:29:11 EndTime=Unknown Partition=debug ReqNodeList=(null) ExcNodeList=node[2-3] "
        "NodeList= Command=/tmp/mt/job.sh WorkDir=/tmp/mt Comment=relaunch:max_attempts=2 other  "
        "StdErr=/tmp/mt/job-1.out StdIn=/dev/null StdOut=/tmp/mt/job-1.out Power= ")


def test_scontrol_line_with_spaces_in_a_value():
    fields = parse_scontrol_line(HELD)
    assert fields["Comment"] == "relaunch:max_attempts=2 other"
    assert fields["StdOut"] == "/tmp/mt/job-1.out" and fields["Restarts"] == "1"


# The same job as 22.05.8's `squeue --json` prints it (no `hold` field on 22.05: Priority 0 and the reason say it).
HELD_JSON = {
    "job_id": 1, "name": "job.sh", "priority": 0, "job_state": "PENDING", "state_reason": "job_requeued_in_held_state",
    "requeue": True, "restart_cnt": 1, "exit_code": 256, "submit_time": 1795966021, "eligible_time": 1795966151,
    "start_time": 1795966151, "end_time": 0, "partition": "debug", "required_nodes": "", "excluded_nodes": "node[2-3]",
    "nodes": "", "node_count": 1, "comment": "relaunch:max_attempts=2 other", "current_working_directory": "/tmp/mt",
    "standard_output": "/tmp/mt/job-%j.out", "standard_error": "", "user_name": "root"}


def test_the_text_lets_a_value_pose_as_a_key_which_is_why_relaunch_reads_json():
    crafted = HELD.replace("JobName=job.sh", "JobName=x Requeue=0 Restarts=zz")
    assert parse_scontrol_line(crafted)["Requeue"] == "0" and parse_scontrol_line(crafted)["Restarts"] == "zz"
    obs = observed_from_rest({**HELD_JSON, "name": "x Requeue=0 Restarts=zz"})
    assert obs.requeue_allowed and obs.restarts == 1


def test_held_successor_is_recognised():
    obs = observed_from_rest(HELD_JSON)
    assert obs.exists and obs.state == "PENDING" and obs.held and obs.restarts == 1
    assert obs.excluded == ("node2", "node3") and obs.exit_code == "1:0"
    assert obs.eligible_at == dt.datetime(2026, 11, 29, 15, 29, 11, tzinfo=dt.UTC)


def test_released_successor_is_not_held():
    assert not observed_from_rest({**HELD_JSON, "priority": 4294901758, "state_reason": "None"}).held


@pytest.mark.parametrize("expr,hosts", [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[1-2,4],gpu07", ["node1", "node2", "node4", "gpu07"]),
    ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
    ("", []),
])
def test_hostlists(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize("expr", ["node[1-", "node[a-b]", "node[1-3]x[2]"])
def test_malformed_hostlists_are_refused(expr):
    with pytest.raises(ValueError):
        expand(expr)


def test_wait_status():
    assert exit_code(256) == 1
    assert exit_code(0) == 0
    assert exit_code(11) == 139  # killed by SIGSEGV


def test_only_opted_in_jobs_are_observed():
    listing = {"jobs": [
        {"job_id": 1, "name": "a", "job_state": "RUNNING", "restart_cnt": 0, "nodes": "node[1-2]",
         "comment": "relaunch:max_attempts=2", "partition": "debug", "exit_code": 0, "state_reason": "None"},
        {"job_id": 2, "name": "b", "job_state": "RUNNING", "restart_cnt": 0, "nodes": "node3", "comment": "other"},
        {"job_id": 3, "name": "c", "job_state": "FAILED", "restart_cnt": 1, "nodes": "node4",
         "comment": "x relaunch", "exit_code": 256, "state_reason": "NonZeroExitCode"},
    ]}
    jobs = opted_in_jobs(listing)
    assert [j.job_id for j in jobs] == ["1", "3"]
    assert jobs[0].nodes == ("node1", "node2") and jobs[0].exit_code is None
    assert jobs[1].exit_code == 1 and jobs[1].restarts == 1


def test_slurms_none_reason_is_no_reason():
    # squeue writes state_reason "None" for a job with no reason: the API said "reason": "None" (issue 40).
    listing = {"jobs": [
        {"job_id": 1, "name": "a", "job_state": "RUNNING", "restart_cnt": 0, "nodes": "node1",
         "comment": "relaunch", "exit_code": 0, "state_reason": "None"},
        {"job_id": 3, "name": "c", "job_state": "FAILED", "restart_cnt": 1, "nodes": "node4",
         "comment": "relaunch", "exit_code": 256, "state_reason": "NonZeroExitCode"},
    ]}
    assert [j.reason for j in opted_in_jobs(listing)] == ["", "NonZeroExitCode"]
