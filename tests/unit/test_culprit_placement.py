"""The culprit host printed on another line than the failure (issue 36, item 6): torchrun's error summary,
srun's task lines and Cray MPICH's error prefix place a failure that blames a host and names none
(classifying.py; docs/log-ingest.md, "Which host a line blames"), the same offline and live."""

from __future__ import annotations

import datetime as dt
import io

from relaunch.common.diagnosis.offline import classify_stream, load_scanner
from relaunch.common.schemas import LogBatch
from relaunch.detector.domain.detection import crash_from_log

SCANNER = load_scanner()
NOW = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.UTC)


def summary(host: str, rank: int, exitcode: int = -6) -> list[str]:
    """torchrun's summary as torch/distributed/elastic/multiprocessing/errors/__init__.py prints it."""
    return ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "============================================================", "train.py FAILED",
            "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>",
            "------------------------------------------------------------", "Root Cause (first observed failure):",
            "[0]:", "  time      : 2024-05-01_10:11:12", f"  host      : {host}",
            f"  rank      : {rank} (local_rank: {rank % 8})", f"  exitcode  : {exitcode} (pid: 12345)",
            "  error_file: <N/A>", f"  traceback : Signal {-exitcode} (SIGABRT) received by PID 12345",
            "============================================================"]


ECC = "[rank10]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
NCCL_ON_VICTIM = ("[rank2]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                  "remote process exited or there was a network error, NCCL version 2.21.5")


def offline(lines: list[str]):
    return classify_stream(io.BytesIO(("\n".join(lines) + "\n").encode()), SCANNER)


def live(lines: list[str], nodes: list[str]):
    batch = LogBatch(cluster="c", job_id="1", attempt=0, path="/j/1.out", offset=0, lines=lines, read_at=NOW)
    found = crash_from_log(batch, SCANNER, nodes, NOW)
    return None if found is None else found[0]


def test_torchrun_summary_names_the_host_of_a_hardware_failure_offline_and_live():
    lines = [ECC, *summary("gpu-node-17.cluster.local", 10)]
    found = offline(lines)
    assert found is not None and found.action == "restart_excluding" and found.nodes == ("gpu-node-17",)
    assert any("host      : gpu-node-17" in e.text for e in found.evidence)
    anomaly = live(lines, ["gpu-node-16", "gpu-node-17"])
    assert anomaly is not None and anomaly.nodes == ["gpu-node-17"]


def test_srun_labels_in_front_of_the_summary_change_nothing():
    lines = [f"{i % 4}: {line}" for i, line in enumerate([ECC, *summary("gpu-node-17", 10)])]
    assert offline(lines).nodes == ("gpu-node-17",)


def test_of_several_summaries_the_entry_with_the_failed_rank_names_the_host():
    lines = [ECC, *summary("gpu-node-16", 3, exitcode=-15), *summary("gpu-node-17", 10), *summary("gpu-node-18", 20)]
    assert offline(lines).nodes == ("gpu-node-17",)


def test_summaries_of_several_hosts_and_no_rank_to_match_name_no_host():
    lines = [NCCL_ON_VICTIM.replace("[rank2]: ", ""), "srun: error: gpu-node-16: task 0: Exited with exit code 1",
             "srun: error: gpu-node-17: task 1: Exited with exit code 1"]
    found = offline(lines)
    assert found is not None and found.nodes == ()


def test_srun_task_line_places_a_host_blaming_failure_when_it_names_one_host():
    lines = ["RuntimeError: CUDA error: uncorrectable ECC error encountered",
             "srun: error: nid001234: task 10: Exited with exit code 1"]
    found = offline(lines)
    assert found.action == "restart_excluding" and found.nodes == ("nid001234",)


def test_cray_mpich_error_prefix_places_the_failure():
    lines = ["2047: cudaSetDevice(cuda_device_id) error( cudaErrorDevicesUnavailable): CUDA-capable device(s) "
             "is/are busy or unavailable",
             "2047: MPICH ERROR [Rank 2047] [job id 57638547.0] [Fri Aug 28 22:45:13 2026] [nid004069] - Abort(1) "
             "(rank 2047 in comm 432): application called MPI_Abort(comm=0xC4000001, 1) - process 2047"]
    assert offline(lines).nodes == ("nid004069",)


def test_a_report_printed_before_the_failure_does_not_place_it():
    lines = ["srun: error: nid000001: task 0: Exited with exit code 1", "previous step done",
             "RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    assert offline(lines).nodes == ()


def test_an_application_error_never_names_a_host_from_the_summary():
    lines = ["[rank10]: ModuleNotFoundError: No module named 'flash_attn'", *summary("gpu-node-17", 10, exitcode=1)]
    found = offline(lines)
    assert found.action == "stop" and found.nodes == ()
    anomaly = live(lines, ["gpu-node-16", "gpu-node-17"])
    assert anomaly.action == "stop" and anomaly.nodes == ["gpu-node-16", "gpu-node-17"]


def test_a_host_outside_the_job_is_no_culprit_live():
    anomaly = live([ECC, *summary("login-node-1", 10)], ["gpu-node-16", "gpu-node-17"])
    assert anomaly.nodes == ["gpu-node-16", "gpu-node-17"]  # (_implicated: a hint only, the job's nodes)


def test_a_line_that_names_its_own_host_keeps_it():
    lines = ["gpu-n12:5150:5201 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : Got async event : local "
             "catastrophic error", *summary("gpu-n13", 4)]
    assert offline(lines).nodes == ("gpu-n12",)


def test_summary_lines_alone_are_no_failure():
    assert offline(["  host      : gpu-node-17", "  rank      : 10 (local_rank: 2)"]) is None
