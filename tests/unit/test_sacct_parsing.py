"""sacct -P records (Slurm 22.05), the chain of one job's attempts, and sinfo's node counts and conditions."""

import datetime as dt

import pytest

from relaunch.actuator.domain.accounting import job_chain, parse_exit_code, parse_sacct
from relaunch.actuator.domain.observing import opted_in_jobs, parse_node_conditions, usable_nodes_by_partition


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC)  # sacct times are local wall-clock


# Real output of `sacct -X -D -P -n -j 1,2 --format=JobIDRaw,JobName,State,ExitCode,Submit,End,NodeList,
# Partition,Comment` on the test stack: job 1 failed (exit 3), was requeued, failed again; job 2 was killed.
SACCT = """\
1|act-job.sh|REQUEUED|3:0|2026-11-29T17:54:35|2026-11-29T17:54:39|node1|debug|relaunch
1|act-job.sh|FAILED|3:0|2026-11-29T17:54:39|2026-11-29T17:55:38|node[1-2]|debug|relaunch
2|wrap|CANCELLED by 0|0:9|2026-11-29T17:55:39|2026-11-29T17:55:43|node1|debug|relaunch:policy=a|b
"""


def test_records_parse_with_exit_codes_nodes_and_a_comment_holding_the_separator():
    records = parse_sacct(SACCT)
    assert [(r.job_id, r.state, r.exit_code) for r in records] == [
        ("1", "REQUEUED", 3), ("1", "FAILED", 3), ("2", "CANCELLED", 137)]
    assert records[1].nodes == ("node1", "node2")
    assert records[1].submit == utc("2026-11-29T17:54:39")
    assert records[2].comment == "relaunch:policy=a|b"
    assert records[1].final and not records[0].final


@pytest.mark.parametrize("text, code", [("3:0", 3), ("0:9", 137), ("0:0", 0), ("1:15", 143), ("", None), ("x:y", None)])
def test_exit_code_is_the_code_or_128_plus_the_signal(text, code):
    assert parse_exit_code(text) == code


def test_odd_lines_are_skipped_not_fatal():
    text = "garbage\n3|j|FAILED|1:0|Unknown|Unknown|node1|debug|x\n" + SACCT
    assert [r.job_id for r in parse_sacct(text)] == ["1", "1", "2"]


def test_the_chain_links_a_requeued_attempt_to_the_next():
    chain = job_chain(parse_sacct(SACCT), "1")
    assert [r.state for r in chain] == ["REQUEUED", "FAILED"]


def test_an_older_job_with_the_same_id_is_not_part_of_the_chain():
    old = "1|old|COMPLETED|0:0|2026-11-28T09:00:00|2026-11-28T10:00:00|node3|debug|relaunch\n"
    chain = job_chain(parse_sacct(old + SACCT), "1")
    assert [r.submit for r in chain] == [utc("2026-11-29T17:54:35"), utc("2026-11-29T17:54:39")]


def test_the_chain_stops_at_the_attempt_asked_about():
    chain = job_chain(parse_sacct(SACCT), "1", before=utc("2026-11-29T17:54:35"))
    assert [r.state for r in chain] == ["REQUEUED"]


def test_no_records_no_chain():
    assert job_chain(parse_sacct(SACCT), "9") == []


def test_squeue_submit_time_is_read_from_epoch_seconds():
    listing = {"jobs": [{"job_id": 4, "comment": "relaunch", "job_state": "RUNNING", "restart_cnt": 0, "submit_time": 1795974879,
                         "nodes": "node1"}]}
    (job,) = opted_in_jobs(listing)
    assert job.submitted == dt.datetime.fromtimestamp(1795974879, dt.UTC)


def test_usable_nodes_count_only_nodes_that_run_jobs_now():
    text = "debug|node1|idle\ndebug|node2|drain\ndebug|node3|mix\ndebug|node4|idle*\ngpu|node3|mix\ngpu|node5|down\n"
    assert usable_nodes_by_partition(text) == {"debug": 2, "gpu": 1}


def test_node_conditions_keep_the_reason_and_see_drains():
    text = ("node2|drained|relaunch: job 7 attempt 0: gpu-probe: failed [root@2026-11-29T18:00:00]\n"
            "node3|draining|maintenance\nnode3|draining|maintenance\nnode1|idle|none\nnode4|down*|Not responding\n")
    found = parse_node_conditions(text)
    assert found["node2"].draining and found["node2"].reason.startswith("relaunch: job 7")
    assert found["node3"].draining
    assert not found["node1"].draining and found["node1"].reason == ""
    assert found["node4"].state == "down" and not found["node4"].draining
