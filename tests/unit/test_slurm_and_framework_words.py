"""Issue 36, items 3-6: Slurm's own words (preemption, slurmstepd's set-up errors on a node, a step
cancelled for a node failure) and other frameworks' wording of the same failures (JAX's coordination
service, XLA and TensorFlow runtime errors, imports wrapped by the library that tried them), read the
same offline (`relaunch classify`) and live (the detector), and decided as a user would expect."""

from __future__ import annotations

import datetime as dt
import io

import pytest

from relaunch.client import classify_command
from relaunch.common.diagnosis.offline import verdict_of_stream
from relaunch.common.diagnosis.scanning import scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.common.optin import parse_comment
from relaunch.common.policies.policy_file import load_policies
from relaunch.common.policies.policy_set import resolve
from relaunch.common.schemas import AnomalyDetected, JobObserved, LogBatch
from relaunch.decider.domain.attribution import attribute
from relaunch.decider.domain.history import History
from relaunch.decider.domain.policy import decide
from relaunch.detector.domain.detection import crash_from_log, crash_from_scheduler, scheduler_state

NOW = dt.datetime(2026, 12, 4, 10, 5, tzinfo=dt.UTC)
CAT = builtin_catalogue()
SCANNER = scanner_for(CAT)
JOB = ["node3", "node4"]

PREEMPTED = "slurmstepd: error: *** JOB 1234 ON node3 CANCELLED AT 2026-12-04T10:00:00 DUE TO PREEMPTION ***"
NODE_FAILURE = ("slurmstepd-node3: error: *** STEP 2.0 ON node3 CANCELLED AT 2026-12-04T10:00:00 DUE TO NODE FAILURE, "
                "SEE SLURMCTLD LOG FOR DETAILS ***")


def verdict(lines: list[str]):
    """The log's verdict offline and live, which must agree (docs/log-ingest.md, "One verdict")."""
    offline = verdict_of_stream(io.BytesIO("".join(f"{line}\n" for line in lines).encode()), SCANNER)
    live = crash_from_log(LogBatch(cluster="c", job_id="2", attempt=0, path="/x/slurm-2.out", offset=0,
                                   lines=lines, read_at=NOW), CAT, JOB, NOW)
    assert (offline is None) == (live is None)
    if live is not None:
        assert (offline.signature_id, offline.action) == (live[0].signature_id, live[0].action)
    return offline, live[0] if live else None


def decided(anomaly: AnomalyDetected, comment: str = "relaunch", slurm_state: str = "", events=()):
    policy = resolve(parse_comment(comment), load_policies())
    suspects = attribute(anomaly, JOB, list(events), NOW, ib_pair=policy.ib_pair, slurm_state=slurm_state)
    return decide(History(), anomaly, policy, NOW, suspects), suspects


# -- item 3: preemption ---------------------------------------------------------------------------------

def test_slurms_preemption_line_is_a_restart_in_the_scheduler_domain_not_a_users_cancel():
    found, anomaly = verdict([PREEMPTED])
    assert (found.signature_id, found.fault_domain, found.action) == ("slurm_preempted", "scheduler", "restart")
    decision, _ = decided(anomaly)
    assert decision.kind == "restart"
    off, _ = decided(anomaly, "relaunch:preemption=off")
    assert (off.kind, off.rule) == ("stop", "preemption")


def test_a_preemption_with_grace_time_is_still_a_preemption():
    """GraceTime: Slurm sends SIGTERM first, which slurmstepd reports as a plain cancel, and the ranks react
    to it before the line that says PREEMPTION comes."""
    found, _ = verdict([
        "slurmstepd: error: *** STEP 1234.0 ON node3 CANCELLED AT 2026-12-04T09:55:00 ***",
        "[rank0]: RuntimeError: DataLoader worker (pid 4242) is killed by signal: Terminated.",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        PREEMPTED,
    ])
    assert (found.signature_id, found.action) == ("slurm_preempted", "restart")


@pytest.mark.parametrize("state, reason, expected", [
    ("PREEMPTED", "None", "PREEMPTED"),
    ("CANCELLED", "Preempted", "PREEMPTED"),
    ("CANCELLED", "job preempted by a higher priority job", "PREEMPTED"),
    ("CANCELLED", "None", "CANCELLED"),
])
def test_the_scheduler_fallback_never_takes_a_preemption_for_a_users_cancel(state, reason, expected):
    obs = JobObserved(cluster="c", job_id="2", state=state, reason=reason, restarts=0, nodes=JOB, observed_at=NOW)
    assert scheduler_state(obs) == expected
    anomaly = crash_from_scheduler(obs, NOW)
    if expected == "CANCELLED":
        assert anomaly is None  # a user's cancel: nothing to undo
        return
    assert (anomaly.category, anomaly.fault_domain, anomaly.action) == ("slurm_preempted", "scheduler", "restart")
    assert anomaly.signature_id == "scheduler_preempted" and f"Slurm reports {state}" in anomaly.summary
    assert decided(anomaly)[0].kind == "restart"


# -- item 3: slurmstepd's errors on a node ----------------------------------------------------------------

@pytest.mark.parametrize("line, node", [
    ("slurmstepd-node3: error: execve(): /var/spool/slurmd/job01234/slurm_script: No such file or directory", "node3"),
    ("0: slurmstepd-node3: error: execve(): /var/spool/slurmd/job01234/slurm_script: Permission denied", "node3"),
    ("slurmstepd-node3: error: couldn't chdir to /tmp either. dying", "node3"),
    ("slurmstepd-node3: error: StepId=1234.extern prolog failed status=1:0", "node3"),
    ("salloc: Prolog failure on node node3", "node3"),
    ("slurmstepd: error: couldn't chdir to `/scratch/u/run': Transport endpoint is not connected", None),
])
def test_slurmstepds_set_up_errors_point_at_the_node_that_printed_them(line, node):
    found, anomaly = verdict([line])
    assert (found.fault_domain, found.action) == ("infrastructure", "restart_excluding")
    decision, suspects = decided(anomaly)
    assert decision.kind == "restart"
    if node is None:  # plain `slurmstepd:` names no node: nothing to leave out on a job of two
        assert found.nodes == () and decision.exclude_nodes == ()
    else:
        assert found.nodes == (node,) and decision.exclude_nodes == (node,)


def test_a_working_directory_slurmstepd_replaced_with_tmp_is_a_warning_not_a_failure():
    # slurmstepd goes on in /tmp (a run in that state completed: tests/corpus n349); what the program then
    # cannot find it reports itself
    line = "slurmstepd-node3: error: couldn't chdir to `/scratch/u/run': No such file or directory: going to /tmp instead"
    assert verdict([line]) == (None, None)
    found, _ = verdict([line, "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'"])
    assert found.signature_id == "python_application_error"


def test_a_tmpdir_error_is_the_nodes_but_explains_a_failure_only_when_nothing_else_does():
    tmpdir = "slurmstepd-node4: error: Unable to create TMPDIR [/tmp/slurm-1234]: No space left on device"
    alone, anomaly = verdict([tmpdir, "srun: error: node4: task 1: Exited with exit code 1"])
    assert (alone.signature_id, alone.action, alone.nodes) == ("slurm_node_tmpdir_error", "restart_excluding",
                                                              ("node4",))
    assert decided(anomaly)[0].exclude_nodes == ("node4",)
    later, _ = verdict([tmpdir, "ModuleNotFoundError: No module named 'flash_attn'"])
    assert (later.signature_id, later.action) == ("python_application_error", "stop")


def test_a_step_stopped_for_a_task_failure_is_teardown_not_a_users_cancel():
    for line in ("slurmstepd: error: *** STEP 2.0 ON node3 CANCELLED AT 2026-12-04T10:00:00 DUE TO TASK FAILURE ***",
                 "slurmstepd: error: *** STEP 2.0 ON node3 FAILED (non-zero exit code or other failure mode) ***"):
        found, _ = verdict([line])
        assert (found.signature_id, found.role, found.action) == ("slurm_step_task_failure", "teardown", "restart")
        first, _ = verdict(["[rank1]: KeyError: 'input_ids'", line])
        assert first.signature_id == "python_application_error"
    cancel, _ = verdict(["slurmstepd: error: *** JOB 2 ON node3 CANCELLED AT 2026-12-04T10:00:00 DUE to SIGNAL "
                         "Terminated ***"])
    assert (cancel.signature_id, cancel.action) == ("slurm_cancelled", "stop")


# -- item 6: the culprit host -------------------------------------------------------------------------------

def test_the_node_failure_line_names_a_survivor_so_it_makes_no_node_a_suspect():
    """The issue's run: a 2-node job on node3,node4, node4 cut off; slurmstepd on node3 printed the line, and
    relaunch excluded node3, the healthy node."""
    found, anomaly = verdict([NODE_FAILURE])
    assert (found.signature_id, found.action, found.nodes) == ("slurm_node_failure", "restart", ())
    assert anomaly.nodes == JOB  # the detector hands the job's nodes on when no line names one
    for state in ("", "NODE_FAIL"):
        decision, suspects = decided(anomaly, slurm_state=state)
        assert "node3" not in decision.exclude_nodes and all(s.node != "node3" for s in suspects)
        assert decision.kind == "restart"
    # Even where a catalogue still locates the survivor (an operator's locator, an old detector), the
    # line implicates no node.
    located = anomaly.model_copy(update={"nodes": ["node3"]})
    decision, suspects = decided(located, slurm_state="NODE_FAIL")
    assert suspects == () and decision.exclude_nodes == ()


def test_the_failed_node_still_comes_from_slurms_node_fail_and_the_nodes_silence():
    lost = AnomalyDetected(anomaly_id="c.2.0.crash", cluster="c", job_id="2", attempt=0, kind="crash",
                           source="node", signature_id="node_lost", category="node_lost",
                           fault_domain="infrastructure", action="restart_excluding",
                           summary="node4's gpu-probe fell silent while the job's progress stopped",
                           nodes=["node4"], detected_at=NOW)
    decision, suspects = decided(lost, slurm_state="NODE_FAIL")
    assert decision.exclude_nodes == ("node4",)
    single = crash_from_scheduler(JobObserved(cluster="c", job_id="2", state="NODE_FAIL", restarts=0,
                                              nodes=["node4"], observed_at=NOW), NOW)
    policy = resolve(parse_comment("relaunch"), load_policies())
    suspects = attribute(single, ["node4"], [], NOW, ib_pair=policy.ib_pair, slurm_state="NODE_FAIL")
    assert [s.node for s in suspects if s.excluded] == ["node4"]
    assert any(r.startswith("Slurm: ") for r in suspects[0].reasons)


def test_a_step_cancelled_for_a_time_limit_still_names_its_host():
    line = "slurmstepd: error: *** STEP 32233190.0 ON nid01934 CANCELLED AT 2020-07-03T02:59:56 DUE TO TIME LIMIT ***"
    assert SCANNER.match_line(line, 0).nodes == ("nid01934",)
    assert SCANNER.match_line(NODE_FAILURE, 0).nodes == ()


# -- item 4: JAX, XLA, TensorFlow ------------------------------------------------------------------------------

JAX_VICTIM = [
    "E0929 17:42:48.594192 1044529 coordination_service_agent.cc:332] Polled an error from coordination service "
    "(this can be an error from this or another task).",
    "F0929 17:42:48.594200 1044529 client.h:77] Terminating process because the JAX distributed service detected "
    "fatal errors. This most likely indicates that another task died; see the other task logs for more details.",
]


def test_jax_peers_lost_mid_run_is_a_restartable_symptom():
    found, anomaly = verdict(JAX_VICTIM)
    assert (found.signature_id, found.role, found.action) == ("jax_coordination_lost", "symptom", "restart")
    assert decided(anomaly)[0].kind == "restart"


@pytest.mark.parametrize("cause, signature, action", [
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 "
     "bytes.", "cuda_oom", "stop"),
    ("srun: error: node4: task 1: Killed", "srun_task_killed", "restart_excluding"),
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to execute XLA Runtime executable: run time error: "
     "custom call 'xla.gpu.func.launch' failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was "
     "encountered.", "cuda_illegal_memory_access", "restart"),
    ("jax.errors.JaxRuntimeError: INTERNAL: Failed to allocate 1048576 bytes for new constant",
     "xla_runtime_error", "restart"),
    ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: ptxas exited with non-zero error code 65280, output:",
     "cuda_environment_mismatch", "stop"),
    ("jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Executable expected parameter 0 of size 4096 but got "
     "buffer with incompatible size 8192", "python_library_error", "stop"),
])
def test_the_task_that_failed_says_why_whatever_its_place_beside_the_victims(cause, signature, action):
    for lines in ([cause, *JAX_VICTIM], [*JAX_VICTIM, cause]):
        found, _ = verdict(lines)
        assert (found.signature_id, found.action) == (signature, action), lines


def test_tasks_that_never_registered_at_start_up_are_not_restarted_unless_a_task_said_why():
    barrier = ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: "
               "PjRT_Client_Connect. Timed out task names:")
    found, _ = verdict([barrier, "/job:jax_worker/replica:0/task:1"])
    assert (found.signature_id, found.action) == ("jax_cluster_registration_failed", "stop")
    crashed, _ = verdict([barrier, "srun: error: Task launch for StepId=1234.0 failed on node node4: "
                                   "Communication connection failure"])
    assert (crashed.signature_id, crashed.nodes) == ("slurm_task_launch_failed", ("node4",))


def test_tensorflow_runtime_errors_by_failure_mode():
    lines = {"tensorflow.python.framework.errors_impl.UnavailableError: Socket closed": "jax_coordination_lost",
             "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor of shape "
             "[4096] and type float": "cuda_oom",
             "tensorflow.python.framework.errors_impl.InternalError: stream did not block host until done":
                 "xla_runtime_error",
             "tensorflow.python.framework.errors_impl.InvalidArgumentError: indices[3] = 70000 is not in [0, 50257)":
                 "python_library_error"}
    for line, signature in lines.items():
        assert SCANNER.match_line(line, 0).signature.id == signature, line


# -- item 5: wrapped environment errors ------------------------------------------------------------------------

def test_an_import_wrapped_by_the_library_that_tried_it_is_the_jobs_environment_stop():
    found, anomaly = verdict([
        "RuntimeError: Failed to import transformers.models.llama.modeling_llama because of the following error "
        "(look up to see its traceback):",
        "/opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined "
        "symbol: _ZN3c104cuda9SetDeviceEi",
    ])
    assert (found.signature_id, found.fault_domain, found.action) == ("python_import_failed", "application", "stop")
    assert decided(anomaly)[0].kind == "stop"


def test_a_warning_about_an_undefined_symbol_is_not_the_crash():
    line = ("/usr/lib/python3/dist-packages/torchvision/io/image.py:13: UserWarning: Failed to load image Python "
            "extension: '/usr/lib/python3/dist-packages/torchvision/image.so: undefined symbol: _ZN3c1017Register'")
    assert SCANNER.match_line(line, 0) is None
    info = "node1:1:1 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file"
    assert SCANNER.match_line(info, 0) is None


def test_classify_json_shows_the_new_verdicts(tmp_path, capsys):
    path = tmp_path / "slurm-2.out"
    path.write_text(NODE_FAILURE + "\n")
    assert classify_command.main(["--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert '"signature": "slurm_node_failure"' in out and '"nodes": []' in out


def test_a_cancel_for_preemption_is_read_as_preempted_by_every_service():
    """The detector's fallback and the decider's 'user cancelled' rule read one function (job_states.as_read):
    a CANCELLED job whose reason names a preemption is never a user's cancel."""
    from relaunch.common.job_states import FAILED_STATES, as_read
    assert as_read("CANCELLED", "Preempted by a higher priority job") == "PREEMPTED" in FAILED_STATES
    assert as_read("CANCELLED", "None") == "CANCELLED"
    assert as_read("FAILED", "preempt") == "FAILED"
