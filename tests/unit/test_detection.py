import datetime as dt
import os
import time

import pytest

from relaunch.common.schemas import JobObserved, LogBatch
from relaunch.common.diagnosis.classifying import classify
from relaunch.detector.domain.detection import crash_from_log, crash_from_scheduler
from relaunch.common.diagnosis.scanning import scanner_for
from relaunch.common.diagnosis.signatures import CatalogueError, builtin_catalogue, parse_catalogue

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
CAT = builtin_catalogue()


def batch(lines, attempt=0):
    return LogBatch(cluster="c", job_id="9", attempt=attempt, path="/x/job.out", offset=100, lines=lines, read_at=NOW)


@pytest.mark.parametrize("line", [
    "Segmentation fault (core dumped)",
    "/var/spool/slurmd/job00012/slurm_script: line 8: 4321 Segmentation fault      python train.py",
    "Fatal Python error: Segmentation fault",
    "torch.distributed.elastic.multiprocessing.api: failed (exitcode: -11) ... Signal 11 (SIGSEGV) received",
])
def test_segfaults_are_recognised(line):
    found = crash_from_log(batch(["step 1", line]), CAT, ["node1"], NOW)
    assert found is not None
    anomaly, cascade = found
    assert anomaly.signature_id == "segfault" and not cascade and anomaly.action == "restart"
    assert anomaly.evidence[0].text == line and anomaly.nodes == ["node1"]
    assert anomaly.evidence[0].offset == 100 + len("step 1\n")


def test_nccl_watchdog_timeout_is_a_cascade_symptom():
    line = ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "Timeout(ms)=600000) ran for 600121 milliseconds before timing out.")
    anomaly, cascade = crash_from_log(batch([line]), CAT, [], NOW)
    assert anomaly.signature_id == "nccl_collective_timeout" and cascade


def test_initiating_error_wins_over_an_earlier_cascade_line():
    lines = ["[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(...)", "Segmentation fault"]
    assert classify(scanner_for(CAT).scan(lines)).signature_id == "segfault"


def test_healthy_lines_give_nothing():
    assert crash_from_log(batch(["epoch 1 loss 0.3", "saving checkpoint", ""]), CAT, [], NOW) is None


def test_huge_and_binary_lines_are_bounded():
    junk = "\x00\xff\ufffd" * 3_000_000 + "Segmentation fault"
    started = time.monotonic()
    assert crash_from_log(batch([junk]), CAT, [], NOW) is None  # beyond MAX_LINE: not matched
    assert time.monotonic() - started < 2.0


def test_one_anomaly_id_per_attempt():
    a0, _ = crash_from_log(batch(["Segmentation fault"], attempt=0), CAT, [], NOW)
    a1, _ = crash_from_log(batch(["Segmentation fault"], attempt=1), CAT, [], NOW)
    assert a0.anomaly_id == "c.9.0.crash" and a1.anomaly_id == "c.9.1.crash"


def test_scheduler_fallback_when_no_line_explains():
    obs = JobObserved(cluster="c", job_id="9", state="FAILED", reason="NonZeroExitCode", restarts=2,
                      nodes=["node3"], exit_code=3, observed_at=NOW)
    anomaly = crash_from_scheduler(obs, NOW)
    assert anomaly.source == "scheduler" and anomaly.attempt == 2 and "exit code 3" in anomaly.summary
    assert anomaly.exit_code == 3
    assert crash_from_scheduler(obs.model_copy(update={"state": "COMPLETED"}), NOW) is None


def test_a_failure_whose_log_could_not_be_read_is_not_restarted_and_says_why():
    obs = JobObserved(cluster="c", job_id="9", state="FAILED", reason="NonZeroExitCode", restarts=0,
                      nodes=["node3"], exit_code=1, observed_at=NOW)
    anomaly = crash_from_scheduler(obs, NOW, log_problem="/x/job-9.out does not exist on the detector's host")
    assert anomaly.action == "stop" and anomaly.category == "log_unread"
    assert "could not read its log (/x/job-9.out does not exist" in anomaly.summary
    node_fail = crash_from_scheduler(obs.model_copy(update={"state": "NODE_FAIL"}), NOW, log_problem="no path")
    assert node_fail.action == "restart_excluding" and "its log could not be read (no path)" in node_fail.summary


def test_unreadable_reason_names_each_missing_file(tmp_path):
    from relaunch.detector.adapters.logfiles import Access, unreadable_reason
    me = Access(os.geteuid(), os.getegid(), ("/",))

    there = tmp_path / "job.out"
    there.write_text("x\n")
    assert unreadable_reason([str(there), str(tmp_path / "gone.err")], me) is None
    assert unreadable_reason([], me) == "Slurm did not say where the job's output went"
    assert "gone.err does not exist" in unreadable_reason([str(tmp_path / "gone.err")], me)


def test_catalogue_validation_names_the_problem():
    good = '[[signature]]\nid="x"\npattern="boom"\ncategory="c"\nfault_domain="unknown"\naction="restart"\n' \
           'cascade=false\nsummary="s"\n'
    assert parse_catalogue(good, "ops.toml").signatures[0].id == "x"
    with pytest.raises(CatalogueError, match="fault_domain"):
        parse_catalogue(good.replace('"unknown"', '"cosmic"'), "ops.toml")
    with pytest.raises(CatalogueError, match="bad pattern"):
        parse_catalogue(good.replace('"boom"', '"(unclosed"'), "ops.toml")
    with pytest.raises(CatalogueError, match="missing"):
        parse_catalogue(good.replace('summary="s"\n', ""), "ops.toml")


def test_culprit_nodes_narrow_the_job_nodes_and_unknown_names_are_dropped():
    lines = ["kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer "
             "10.0.35.1<49189> with error 4, opcode 5327, len 5327, vendor err 81 (Send)"]
    # The line blames its peer, an address: the job's NodeAddr makes it kolyoz1, never kolyoz2 (which printed it).
    addrs = {"kolyoz1": "10.0.35.1", "kolyoz2": "10.0.35.2"}
    anomaly, _ = crash_from_log(batch(lines), CAT, ["kolyoz1", "kolyoz2"], NOW, addrs)
    assert anomaly.nodes == ["kolyoz1"]
    anomaly, _ = crash_from_log(batch(lines), CAT, ["kolyoz1", "kolyoz2"], NOW)
    assert anomaly.nodes == ["kolyoz1", "kolyoz2"]  # no NodeAddr known: an address names no node
    named = [lines[0].replace("10.0.35.1<49189>", "other3<49189>")]
    anomaly, _ = crash_from_log(batch(named), CAT, ["other1", "other2"], NOW)
    assert anomaly.nodes == ["other1", "other2"]  # a name outside the job is never excluded


def test_evidence_offsets_and_ranks_cover_every_rank_of_the_incident():
    lines = ["step 1", "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    anomaly, cascade = crash_from_log(batch(lines), CAT, [], NOW)
    assert anomaly.category == "cuda_oom" and anomaly.action == "stop" and not cascade
    assert anomaly.ranks == [3, 5]
    assert [e.offset for e in anomaly.evidence] == [100 + 7, 100 + 7 + len(lines[1]) + 1]


def test_a_requeue_in_progress_is_not_a_failure_but_a_cancellation_is():
    requeue = "slurmstepd: error: *** JOB 2 ON node1 CANCELLED AT 2026-11-29T16:40:01 DUE TO JOB REQUEUE ***"
    assert crash_from_log(batch(["step 1", requeue]), CAT, ["node1"], NOW) is None
    cancel = "slurmstepd: error: *** JOB 2 ON node1 CANCELLED AT 2026-11-29T16:40:01 ***"
    anomaly, _ = crash_from_log(batch([cancel]), CAT, ["node1"], NOW)
    assert anomaly.signature_id == "slurm_cancelled" and anomaly.action == "stop"
