"""The one normaliser of line prefixes (relaunch.common.diagnosis.prefixes, docs/log-ingest.md "Line
prefixes"): what srun, torchrun, Ray, loggers and containers put before a line never hides an error from
the signatures or a step from the progress parsers, offline and live, and the evidence keeps the line
as printed."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaunch.client import classify_command
from relaunch.common.diagnosis import prefixes
from relaunch.common.diagnosis.offline import verdict_of_stream
from relaunch.common.diagnosis.scan_engines import hyperscan_importable, scanner_with_engine
from relaunch.common.diagnosis.scanning import scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.common.progress.parsing import parse_line
from relaunch.common.schemas import LogBatch
from relaunch.detector.domain.detection import classify_batch

TRACEBACK_END = "ModuleNotFoundError: No module named 'flash_attn'"
PREFIXES = {
    # what each launcher, logger or container prints (docs/log-ingest.md lists the same)
    "srun --label": "15: ",
    "srun --label, padded": "  3: ",
    "torchrun rank": "[rank15]: ",
    "torchrun --tee local rank": "[default3]:",
    "torchrun's rank template": "[15]:",
    "Ray worker": "(RayTrainWorker pid=1234, ip=10.0.0.5) ",
    "Ray task": "(pid=123) ",
    "Ray daemon": "(raylet) ",
    "Ray, coloured": "\x1b[36m(RayTrainWorker pid=1234, ip=10.0.0.5)\x1b[0m ",
    "ISO timestamp": "2026-12-04T10:00:00.123456Z ",
    "timestamp, logging's asctime": "2026-12-04 10:00:00,123 - ",
    "bracketed timestamp": "[2026-12-04 10:00:00,123] ",
    "logging.basicConfig": "ERROR:root:",
    "level in brackets": "[ERROR] ",
    "level and separator": "ERROR - ",
    "loguru": "2026-12-04 10:00:00.123 | ERROR    | train:main:42 - ",
    "glog": "E1204 10:00:00.123456  1234 trainer.cc:12] ",
    "c10 glog": "[E1204 10:00:00.123456 1234 ProcessGroupNCCL.cpp:1316] ",
    "DeepSpeed log_dist": "[2026-12-04 10:00:00,123] [ERROR] [logging.py:96:log_dist] ",
    "docker compose": "trainer-1  | ",
    "mpirun --tag-output": "[1,12]<stderr>:",
    "vLLM logger": "ERROR 03-05 00:25:45 [core.py:1094] ",
    "pdsh host name": "worker-1: ",
    "pdsh host address": "192.168.0.6: ",
    "JAX traceback wrapper": "jax._src.traceback_util.UnfilteredStackTrace: ",
}
# The stacks real launchers make: srun around torchrun, torchrun's --tee under srun, a logger in a container.
STACKS = ["15: [rank15]: ", "0: [default3]:", "(RayTrainWorker pid=1234, ip=10.0.0.5) [rank2]: ",
          "trainer-1  | 2026-12-04T10:00:00Z ERROR:root:", " 7: 2026-12-04 10:00:00,123 - ERROR - ",
          "(LLMRayActor pid=77) (EngineCore_DP0 pid=78) ERROR 03-05 00:25:45 [core.py:1094] ",
          "2026-12-04T10:00:00.123Z: [1,12]<stdout>:",
          "192.169.83.120: [2026-12-04 10:00:00,123] [ERROR] [logging.py:96:log_dist] ", "gpu-node-07: [rank8]: "]
SCANNER = scanner_for(builtin_catalogue())


def verdict(line: str, scanner=SCANNER) -> str | None:
    found = scanner.match_line(line, 0)
    return found.signature.id if found else None


@pytest.mark.parametrize("prefix", [*PREFIXES.values(), *STACKS], ids=[*PREFIXES, *STACKS])
def test_an_application_error_behind_any_known_prefix_is_still_an_application_error(prefix):
    line = prefix + TRACEBACK_END
    found = SCANNER.match_line(line, 0)
    assert found is not None and found.signature.id == "python_application_error", line
    assert found.text == line  # the evidence is the raw line


def test_the_prefixes_of_the_issue_stop_the_job_offline_and_live():
    """issue 36: each of these gave "no failure found", and live a job that printed it was restarted."""
    for prefix in ("15: [rank15]: ", "0: [default3]:", "(RayTrainWorker pid=1234, ip=10.0.0.5) "):
        log = "".join(f"{prefix}{line}\n" for line in (
            "Traceback (most recent call last):", '  File "train.py", line 3', TRACEBACK_END))
        offline = verdict_of_stream(io.BytesIO(log.encode()), SCANNER)
        live = classify_batch(LogBatch(cluster="c", job_id="1", attempt=0, path="/x", offset=0,
                                       lines=log.splitlines(), read_at=dt.datetime.now(dt.UTC)), builtin_catalogue())
        for found in (offline, live):
            assert (found.signature_id, found.fault_domain, found.action) == (
                "python_application_error", "application", "stop")
            assert found.evidence[0].text == f"{prefix}{TRACEBACK_END}"
    assert offline.ranks == () and live.ranks == ()  # [default3] is a local rank, 0 an srun task


def test_the_rank_of_a_torchrun_prefix_is_read_even_in_a_stack_or_mid_line():
    assert SCANNER.match_line("15: [rank15]: " + TRACEBACK_END, 0).ranks == (15,)
    joined = SCANNER.match_line("2026-12-04 10:00:00,123 INFO trainer: step 100 done [rank7]: AssertionError: "
                                "labels and logits differ", 0)
    assert joined.signature.id == "python_application_error" and joined.ranks == (7,)


def test_records_joined_on_one_line_are_each_read():
    line = "[2026-12-04 10:00:00,123] [INFO] [engine.py:10:step] saved (RayTrainWorker pid=9, ip=10.0.0.5) " \
           "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert verdict(line) == "cuda_illegal_memory_access"
    assert verdict("[INFO] loading shards [rank3]: KeyError: 'model.embed_tokens.weight'") == "python_application_error"
    assert verdict("0: [default0]:step 9 done[default3]:ModuleNotFoundError: No module named 'x'") == \
        "python_application_error"


def test_a_prefix_never_hides_advice_nor_turns_a_warning_into_an_error():
    warning = "/usr/lib/python3/site-packages/torch/cuda/__init__.py:61: UserWarning: TypeError: not an error"
    for prefix in ("", "[rank0]: ", "0: [default0]:", "(RayTrainWorker pid=1, ip=10.0.0.1) "):
        assert verdict(prefix + warning) is None
    assert verdict("W1204 10:00:00.123456  1234 trainer.cc:12] ValueError: recovered") is None  # a glog warning
    assert verdict("[rank0]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1.") is None


def test_lines_without_a_prefix_are_one_view_and_cost_no_copy():
    assert prefixes.views("iteration 10/ 100 | lm loss: 2.0 |") == (prefixes.View(0),)
    assert prefixes.strip("{'loss': 2.0, 'epoch': 0.1}") == (0, None)


def test_strip_names_the_global_rank_first_then_the_srun_task_then_the_local_rank():
    assert prefixes.strip("15: [rank15]: x")[1] == 15
    assert prefixes.strip("0: [default3]:x") == (len("0: [default3]:"), 0)
    assert prefixes.strip("[default3]:x")[1] == 3
    assert prefixes.strip("[2026-12-04 10:00:00,123] [rank4]: x")[1] == 4
    assert prefixes.strip("0: [12]:x")[1] == 12  # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${rank}]:"
    assert prefixes.strip("[1,12]<stderr>:x")[1] == 12  # Open MPI's --tag-output: [jobid,rank]


def test_a_vllm_engine_record_behind_ray_and_vllm_prefixes_is_read_as_printed():
    line = ("(LLMRayActor pid=5) (EngineCore_DP0 pid=6) ERROR 11-02 09:10:11 [core.py:700] "
            "AttributeError: 'Worker' object has no attribute 'update_weights'")
    assert verdict(line) == "python_application_error"
    assert verdict("(EngineCore_DP0 pid=6) INFO 11-02 09:10:11 [core.py:700] KeyError: recovered") is None


@pytest.mark.parametrize("prefix", [*PREFIXES.values(), *STACKS], ids=[*PREFIXES, *STACKS])
def test_progress_lines_read_the_same_behind_any_prefix(prefix):
    for line in ("  40%|████      | 400/1000 [01:00<01:30,  6.67it/s]",
                 "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.1}",
                 "step 29/80 | loss 6.23 | 0.32 s/step",
                 " iteration      100/  500000 | consumed samples: 51200 | elapsed time per iteration (ms): 1234.5 |"
                 " lm loss: 7.1E+00 | loss scale: 1.0 |"):
        bare, prefixed = parse_line(line), parse_line(prefix + line)
        assert prefixed is not None and (prefixed.step, prefixed.preset) == (bare.step, bare.preset), prefix + line
        assert repr(prefixed.health) == repr(bare.health)


# -- the property: every signature's examples keep their verdict under any stack of known prefixes -----
EXAMPLES = sorted({e for sig in builtin_catalogue().signatures for e in sig.examples})
JOINED = ["", "2026-12-04 10:00:00,123 INFO trainer: step 9 done [rank7]: ",
          "[INFO] loading shards (RayTrainWorker pid=9, ip=10.0.0.5) "]
"""A record of another process before the example on the same line (records joined on one line)."""
prefix_stacks = st.tuples(st.sampled_from(JOINED), st.lists(st.sampled_from(sorted(PREFIXES.values())),
                                                            max_size=4)).map(lambda t: t[0] + "".join(t[1]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(example=st.sampled_from(EXAMPLES), stack=prefix_stacks)
def test_every_signature_example_keeps_its_verdict_under_any_stack_of_known_prefixes(example, stack):
    assert verdict(stack + example) == verdict(example), repr(stack + example)


@pytest.mark.skipif(not hyperscan_importable(), reason="hyperscan is not installed")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(example=st.sampled_from(EXAMPLES), stack=prefix_stacks)
def test_the_scan_engine_picks_every_prefixed_example_and_gives_the_same_verdict(example, stack):
    engine = scanner_with_engine(builtin_catalogue(), "hyperscan")
    line = (stack + example).encode()
    spans = engine.line_finder(b"healthy line\n" + line + b"\n", None)
    if verdict(example) is not None:
        assert spans and spans[-1] == (13, 13 + len(line))
    bare = verdict_of_stream(io.BytesIO(example.encode() + b"\n"), engine)
    prefixed = verdict_of_stream(io.BytesIO(line + b"\n"), engine)
    assert (bare and bare.signature_id) == (prefixed and prefixed.signature_id)


def test_classify_json_on_the_issue_examples(tmp_path, capsys):
    path = tmp_path / "srun-torchrun.log"
    path.write_text(f"15: [rank15]: {TRACEBACK_END}\n")
    assert classify_command.main(["--json", str(path)]) == 0
    assert '"signature": "python_application_error"' in capsys.readouterr().out


@pytest.mark.parametrize("line", [
    "WARNING:root:FileNotFoundError: [Errno 2] No such file or directory: 'cache.json'",
    "2026-12-04 10:00:00,123 - WARNING - trainer - ModuleNotFoundError: No module named 'apex'",
    "W1204 10:00:00.123456 1234 file.cc:12] RuntimeError: retrying the rendezvous",
])
def test_a_logged_warning_that_names_an_exception_is_not_the_crash(line):
    """A record whose level says it is not an error is not read behind that level (a handled exception)."""
    assert verdict_of_stream(io.BytesIO(line.encode() + b"\n"), SCANNER) is None
    control = "ERROR:root:ModuleNotFoundError: No module named 'apex'\n"
    assert verdict_of_stream(io.BytesIO(control.encode()), SCANNER) is not None


def test_pdsh_names_the_host_that_printed_a_hardware_fault_and_a_word_is_no_host():
    # DeepSpeed's multi-node launcher runs ranks through pdsh, which puts the host before each line.
    found = SCANNER.match_line("gpu-node-07: [rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered", 0)
    assert found is not None and found.signature.fault_domain == "hardware"
    assert "gpu-node-07" in found.nodes and 3 in found.ranks
    found = SCANNER.match_line("192.168.0.6: RuntimeError: CUDA error: uncorrectable ECC error encountered", 0)
    assert found is not None and found.addresses == ("192.168.0.6",) and not found.nodes
    assert prefixes.strip("worker-1: [rank8]: step 10")[1] == 8
    assert prefixes.views("error: something") == (prefixes.View(0),)  # a word that ends in no digit
