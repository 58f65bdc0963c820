"""Root-cause selection across lines and ranks, XID classes, and where nodes and ranks come from."""

import pytest

from relaunch.common.diagnosis.classifying import EVIDENCE_MAX, classify
from relaunch.common.diagnosis.scanning import node_name, scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue

SCANNER = scanner_for(builtin_catalogue())

TIMEOUT = ("[rank{r}]:[E1206 18:44:12.7 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=7753, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 milliseconds before "
           "timing out.")
ADVICE = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]


def root(*lines):
    return classify(SCANNER.scan(lines))


def test_an_initiating_error_beats_earlier_cascade_lines():
    found = root(TIMEOUT.format(r=0), TIMEOUT.format(r=1), "[rank2]: torch.OutOfMemoryError: CUDA out of memory.")
    assert found.signature_id == "cuda_oom" and found.ranks == (2,) and not found.cascade


def test_cascade_lines_explain_only_when_nothing_else_does_and_name_every_rank():
    found = root(*(TIMEOUT.format(r=r) for r in (4, 0, 7, 0)))
    assert found.signature_id == "nccl_collective_timeout" and found.cascade
    assert found.ranks == (0, 4, 7) and found.lines == 4
    assert [e.text for e in found.evidence] == [TIMEOUT.format(r=r) for r in (4, 0, 7)]


def test_advice_is_never_a_root_cause():
    assert root(*ADVICE) is None
    found = root(*ADVICE, "RuntimeError: CUDA error: device-side assert triggered", *ADVICE)
    assert found.signature_id == "cuda_device_assert" and found.action == "stop"


def test_ecc_error_then_nccl_watchdog_is_hardware():
    found = root("RuntimeError: CUDA error: uncorrectable ECC error encountered", *ADVICE,
                 "[E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: "
                 "CUDA error: uncorrectable ECC error encountered", TIMEOUT.format(r=3))
    assert (found.fault_domain, found.action, found.ranks) == ("hardware", "restart_excluding", (1,))


def test_a_decisive_line_beats_an_earlier_initiating_error():
    found = root("RuntimeError: CUDA error: an illegal memory access was encountered",
                 "[Mon Feb 2 22:52:45 2026] NVRM: Xid (PCI:0000:cb:00): 79, pid=538578, name=python, GPU has "
                 "fallen off the bus.")
    assert found.signature_id == "gpu_xid_hardware" and found.fault_domain == "hardware"


def test_oom_inside_a_traceback_beats_the_launchers_teardown():
    found = root(
        "Traceback (most recent call last):",
        '  File "train.py", line 228, in main',
        "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 86.00 MiB (GPU 3; 11.75 GiB total capacity)",
        "[2024-01-01 00:00:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) "
        "local_rank: 3 (pid: 1234) of binary: /usr/bin/python",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    )
    assert found.signature_id == "cuda_oom"


def test_a_tracebacks_final_exception_is_what_counts_not_its_source_lines():
    found = root("Traceback (most recent call last):", '  File "model.py", line 49, in forward',
                 "    raise ValueError(f'bad shape {x.shape}')", "    except KeyError:",
                 "[rank0]: AssertionError: 96 is not divisible by 64")
    assert found.signature_id == "python_application_error" and found.ranks == (0,)
    assert found.evidence[0].text.endswith("96 is not divisible by 64")


def test_teardown_alone_still_reports_a_failure():
    found = root("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing signal SIGTERM",
                 "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    assert found.role == "teardown" and found.cascade and found.action == "restart"


def test_a_symptom_beats_teardown_even_when_later():
    found = root("srun: error: nid01934: tasks 0-3: Terminated", TIMEOUT.format(r=2))
    assert found.signature_id == "nccl_collective_timeout"


def test_evidence_is_bounded_and_lines_keep_counting():
    found = root(*(TIMEOUT.format(r=r) for r in range(100)))
    assert len(found.evidence) == EVIDENCE_MAX and found.lines == 100 and found.ranks == tuple(range(100))


@pytest.mark.parametrize("code", [48, 64, 74, 79, 92, 94, 95, 119, 120])
def test_hardware_xids_exclude_the_node(code):
    found = root(f"Dec  2 11:38:47 worker4 kernel: NVRM: Xid (PCI:0000:07:00): {code}, pid=1, name=python, x")
    assert (found.signature_id, found.fault_domain, found.action, found.nodes) == (
        "gpu_xid_hardware", "hardware", "restart_excluding", ("worker4",))


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_xids_once_are_a_program_fault(code):
    found = root(f"NVRM: Xid (PCI:0000:3d:00): {code}, pid=35521, Ch 00000008")
    assert (found.signature_id, found.fault_domain, found.action, found.cascade) == (
        "gpu_xid_application", "application", "restart", True)


def test_application_xids_repeated_on_one_gpu_are_the_gpus_fault():
    lines = [f"[Wed Jan 27 23:0{i}:35 2021] NVRM: Xid (PCI:0000:3d:00): 43, pid={pid}, Ch 00000008"
             for i, pid in enumerate((35521, 36178))]
    assert root(*lines).signature_id == "gpu_xid_hardware"


def test_one_event_over_several_lines_or_several_gpus_is_not_a_repeat():
    same_event = [f"[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, {t}"
                  for t in ("Graphics SM Warp Exception", "Graphics SM Global Exception", "Graphics Exception")]
    assert root(*same_event).signature_id == "gpu_xid_application"
    two_gpus = [f"NVRM: Xid (PCI:0000:{bus}:00): 13, pid={pid}, name=python" for bus, pid in (("3d", 1), ("db", 2))]
    assert root(*two_gpus).signature_id == "gpu_xid_application"


def test_an_xid_caused_by_an_earlier_one_takes_the_earlier_ones_class():
    found = root("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
                 "previous Xid 149")
    assert found.signature_id == "gpu_xid_hardware"


def test_xid_63_is_a_record_not_a_failure_and_unknown_codes_restart():
    assert root("NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
                "marked for remapping, reset gpu to activate.") is None
    found = root("NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, CTX SWITCH TIMEOUT")
    assert (found.signature_id, found.fault_domain, found.action) == ("gpu_xid", "unknown", "restart")


@pytest.mark.parametrize("line, nodes, ranks", [
    ("kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> with "
     "error 4, opcode 5327, len 5327, vendor err 81 (Send)", (), ()),  # the peer, an address (test_peers.py)
    ("[rank5]:ng30903.narval.calcul.quebec:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure "
     "'out of memory'", ("ng30903",), (5,)),
    ("slurmstepd: error: *** STEP 55595933.0 ON maestro-3017 CANCELLED AT 2025-01-10T15:27:25 DUE TO TIME LIMIT ***",
     ("maestro-3017",), ()),
    ("[rank144]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 144] ProcessGroupNCCL's watchdog got stuck for 600 seconds",
     (), (144,)),
    ("Kill task failed root 2024-01-25T15:12:23 ip-10-0-1-23", ("ip-10-0-1-23",), ()),
    ("srun: error: Node failure on gpu-node-12.cluster.local", ("gpu-node-12",), ()),
    ("Feb 22 17:46:38 ip-10-1-74-228 slurmd[13562]: spank-epilog: error: pyxis: mkdir: Permission denied",
     ("ip-10-1-74-228",), ()),
    ("mpirun noticed that process rank 7 with PID 0 on node gpu7 exited on signal 9 (Killed).", ("gpu7",), (7,)),
])
def test_nodes_and_ranks_come_out_of_the_line(line, nodes, ranks):
    found = root(line)
    assert (found.nodes, found.ranks) == (nodes, ranks)


@pytest.mark.parametrize("raw, name", [
    ("node1", "node1"), ("gpu-12.cluster.local", "gpu-12"), ("10.0.35.1", None), ("2001:db8::1", None),
    ("1234", None), ("node[01-04]", None), ("'viz3d-1',", "viz3d-1"),
])
def test_node_names_are_what_slurm_would_accept(raw, name):
    assert node_name(raw) == name


def test_many_ranks_with_the_same_error_are_one_incident_across_nodes():
    lines = [f"node{n}:1{r}:2 [{r}] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'"
             for n in (1, 2) for r in range(4)]
    found = root(*lines)
    assert found.signature_id == "cuda_oom" and found.nodes == ("node1", "node2") and found.lines == 8


WRITE_FAILED = ("RuntimeError: [enforce fail at inline_container.cc:857] . PytorchStreamWriter failed writing file "
                "data/322: file write failed")


def test_a_failed_checkpoint_write_is_restarted_unless_an_errno_says_the_disk_is_full():
    # torch.save's short write names no errno: a full disk and a filesystem that failed one write read the same
    alone = root(WRITE_FAILED)
    assert alone.signature_id == "checkpoint_write_failed" and alone.action == "restart" and alone.cascade
    full = root(WRITE_FAILED, "OSError: [Errno 28] No space left on device")
    assert full.signature_id == "fs_no_space" and full.action == "stop"


def test_a_jax_exception_behind_its_traceback_wrapper_is_the_programs_error():
    found = root("jax._src.traceback_util.UnfilteredStackTrace: jax._src.errors.ConcretizationTypeError: Abstract "
                 "tracer value encountered where concrete value is expected: Traced<ShapedArray(bool[])>")
    assert found.fault_domain == "application" and found.action == "stop"
