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


@pytest.mark.parametrize("case", ["ddp_rank_sigkill", "ddp_worker_killed", "ddp_worker_killed_mid_batch",
                                  "lightning_worker_killed"])
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


# A batch's shared memory fetched from a DataLoader worker (torch 2.13 and Python 3.11 as printed in
# tests/fixtures/frameworks/ddp_worker_killed_mid_batch.log, paths shortened).
HANDOVER = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1291, in _try_get_data',
    "[rank1]:     data = self._data_queue.get(timeout=timeout)",
    '[rank1]:   File "/venv/lib/python3.11/site-packages/torch/multiprocessing/reductions.py", line 538, in '
    "rebuild_storage_fd",
    "[rank1]:     fd = df.detach()",
    '[rank1]:   File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 57, in detach',
]
PEER_GONE = ("[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
             "peer [127.0.0.1]:29421. This is typically caused by a remote worker crashing.")


def test_a_worker_killed_while_handing_a_batch_over_is_told_from_a_lost_network_peer():
    """The real run: PyTorch had not reaped the killed worker yet, so it printed the raw connection
    error, and the other rank's gloo error followed; both alone read as a network fault."""
    with open(FIXTURES / "ddp_worker_killed_mid_batch.log", "rb") as stream:
        found = classify_stream(stream, SCANNER)
    assert (found.signature_id, found.category, found.action, found.ranks) == (
        "dataloader_worker_killed_mid_batch", "dataloader_error", "restart", (1,))


@pytest.mark.parametrize("end", [
    "[rank1]: ConnectionResetError: [Errno 104] Connection reset by peer",
    "[rank1]: ConnectionRefusedError: [Errno 111] Connection refused",
])
def test_a_cut_handover_beats_the_peers_connection_errors_and_loses_to_an_oom_line(end):
    alone = _classify("\n".join([*HANDOVER, end, PEER_GONE]) + "\n")
    assert (alone.signature_id, alone.action) == ("dataloader_worker_killed_mid_batch", "restart")
    found = _classify("\n".join([*HANDOVER, end, PEER_GONE, OOM]) + "\n")
    assert (found.signature_id, found.fault_domain, found.action) == ("host_oom_kill", "resource", "stop")


@pytest.mark.parametrize("end", [
    "[rank1]: RuntimeError: received 0 items of ancdata",
    "[rank1]: OSError: [Errno 24] Too many open files",
])
def test_file_descriptors_that_ran_out_in_the_same_handover_stay_a_resource_fault(end):
    found = _classify("\n".join([*HANDOVER, end]) + "\n")
    assert (found.signature_id, found.fault_domain, found.action) == ("shm_exhausted", "resource", "stop")
