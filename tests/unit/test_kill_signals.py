"""A kill by signal is a resource (OOM) fault only when an OOM line says so; the line naming a lost
node beats the survivors' connection errors; evidence is readable. Real runs where there are some
(tests/fixtures/frameworks), else lines as torchrun, srun and slurmstepd print them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from relaunch.common.diagnosis.classifying import EVIDENCE_CHARS
from relaunch.common.diagnosis.offline import classify_stream, load_scanner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
SCANNER = load_scanner(engine="python")

TORCHRUN_KILLED = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 "
                   "(pid: 4242) of binary: /usr/bin/python3")
OOM = "[441280.839852] Out of memory: Killed process 4242 (python) total-vm:49978204kB, anon-rss:12918388kB"
STEPD_OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.0. Some of your processes may have been "
             "killed by the cgroup out-of-memory handler.")


def _classify(text: str):
    return classify_stream(io.BytesIO(text.encode()), SCANNER)


@pytest.mark.parametrize("case", ["ddp_rank_sigkill", "ddp_worker_killed", "lightning_worker_killed"])
def test_a_real_kill_without_an_oom_line_is_restarted(case):
    path = FIXTURES / f"{case}.log"
    if not path.exists():
        pytest.skip(f"{path} not captured")
    with open(path, "rb") as stream:
        found = classify_stream(stream, SCANNER)
    assert found is not None and found.action == "restart" and found.fault_domain != "resource", found


@pytest.mark.parametrize("lines", [
    [TORCHRUN_KILLED],
    ["RuntimeError: DataLoader worker (pid 12851) is killed by signal: Killed. "],
    ["/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py"],
])
def test_a_kill_alone_is_restartable_and_with_an_oom_line_it_is_a_resource_fault(lines):
    alone = _classify("\n".join(lines) + "\n")
    assert alone.action == "restart" and alone.fault_domain == "unknown"
    for oom in (OOM, STEPD_OOM):
        found = _classify("\n".join([*lines, oom]) + "\n")
        assert (found.signature_id, found.fault_domain, found.action) == ("host_oom_kill", "resource", "stop")


def test_the_line_naming_the_lost_node_beats_a_survivors_broken_pipe():
    log = "\n".join([
        "[rank0]: torch.distributed.DistNetworkError: Broken pipe",
        "[rank0]: Traceback (most recent call last):",
        "srun: error: node1: task 0: Exited with exit code 1",
        "srun: error: node2: task 1: Killed",
        "srun: Terminating StepId=57.0",
    ]) + "\n"
    found = _classify(log)
    assert (found.signature_id, found.action, found.nodes) == ("srun_task_killed", "restart_excluding", ("node2",))


def test_an_application_error_before_srun_kills_the_rest_stays_the_root_cause():
    log = "\n".join([
        "[rank1]: ModuleNotFoundError: No module named 'relaunch_no_such_module'",
        "srun: error: node1: task 0: Exited with exit code 1",
        "srun: error: node2: task 1: Killed",
    ]) + "\n"
    found = _classify(log)
    assert found.fault_domain == "application" and found.action == "stop"


def test_evidence_is_one_readable_line_not_a_blob_of_bar_redraws():
    bar = "".join(f"\r 50%|█████     | {i}/800 [00:03<00:17,  3.90it/s]" for i in range(1, 300))
    found = _classify(bar + "\rRuntimeError: DataLoader worker (pid 325) is killed by signal: Bus error." + "x" * 900
                      + "\n")
    assert found.signature_id == "dataloader_worker_bus_error"
    assert all(len(e.text) <= EVIDENCE_CHARS and "%|" not in e.text for e in found.evidence)
