"""`relaunch classify` (contract): offline, one JSON object per file per line, `-` for stdin."""

import json

from typer.testing import CliRunner

from relaunch.client.cli import app

RUNNER = CliRunner()
OOM = "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.\n"
IB = ("kolyoz2:25146:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> "
      "with error 4, opcode 5327, len 5327, vendor err 81 (Send)\n")


def test_json_gives_one_object_per_file_in_order(tmp_path):
    failing, healthy = tmp_path / "a.log", tmp_path / "b.log"
    failing.write_text("step 1 loss 2.3\n" + OOM)
    healthy.write_text("step 1 loss 2.3\nstep 2 loss 2.1\n")
    result = RUNNER.invoke(app, ["classify", "--json", str(failing), str(healthy)])
    assert result.exit_code == 0, result.output
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first == {"file": str(failing), "anomaly": {
        "kind": "crash", "signature": "cuda_oom", "category": "cuda_oom", "fault_domain": "application",
        "action": "stop", "nodes": [], "ranks": [2], "evidence": [OOM.strip()], "addresses": []}}
    assert second == {"file": str(healthy), "anomaly": None}


def test_dash_reads_standard_input():
    result = RUNNER.invoke(app, ["classify", "--json", "-"], input=IB)
    anomaly = json.loads(result.stdout)["anomaly"]
    assert result.exit_code == 0 and json.loads(result.stdout)["file"] == "-"
    # The line blames its peer (an address: offline it stays one), not kolyoz2, which printed it.
    assert (anomaly["signature"], anomaly["nodes"], anomaly["addresses"]) == ("nccl_ib_error", [], ["10.0.35.1"])


def test_an_unreadable_file_is_named_and_exits_2_after_the_others(tmp_path):
    good = tmp_path / "good.log"
    good.write_text(OOM)
    missing = tmp_path / "missing.log"
    result = RUNNER.invoke(app, ["classify", "--json", str(missing), str(good)])
    assert result.exit_code == 2
    assert f"cannot read {missing}" in result.stderr
    assert json.loads(result.stdout)["anomaly"]["signature"] == "cuda_oom"


def test_the_readable_summary_escapes_log_text(tmp_path):
    log = tmp_path / "odd [red]name.log"
    log.write_bytes(b"\xff\xfe binary [bold]junk\n[rank0]: KeyError: '[/] not markup'\n")
    result = RUNNER.invoke(app, ["classify", str(log)])
    assert result.exit_code == 0, result.output
    assert "odd [red]name.log" in result.stdout
    assert "KeyError: '[/] not markup'" in result.stdout and "fault domain application, action stop" in result.stdout


def test_operator_signatures_are_tried_first_and_bad_ones_are_refused(tmp_path):
    ops = tmp_path / "ops.toml"
    ops.write_text("[[signature]]\nid = 'our_loader'\npattern = 'OurLoaderError'\ncategory = 'data'\n"
                   "fault_domain = 'infrastructure'\naction = 'restart'\ncascade = false\nsummary = 's'\n")
    log = tmp_path / "x.log"
    log.write_text("OurLoaderError: shard 7 is gone\n")
    result = RUNNER.invoke(app, ["classify", "--json", "--signatures", str(ops), str(log)])
    assert json.loads(result.stdout)["anomaly"]["signature"] == "our_loader"
    ops.write_text("[[signature]]\nid = 'bad'\n")
    result = RUNNER.invoke(app, ["classify", "--signatures", str(ops), str(log)])
    assert result.exit_code == 2 and "cannot load signatures" in result.stderr


def test_the_command_imports_no_service_package(tmp_path):
    """The client classifies with relaunch.common.diagnosis, the detector's own code, without the
    detector: a machine with only relaunch-client installed gives the service's answer."""
    import subprocess
    import sys
    log = tmp_path / "x.log"
    log.write_text(OOM)
    probe = ("import sys; from relaunch.client.cli import main; sys.argv = ['relaunch', 'classify', '--json', "
             f"{str(log)!r}]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
             "services = ('detector', 'decider', 'actuator', 'gpu_probe', 'api')\n"
             "print(sorted(m for m in sys.modules if m.split('.')[:2] in [['relaunch', s] for s in services]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, imported = out.stdout.splitlines()
    assert json.loads(first)["anomaly"]["signature"] == "cuda_oom"
    assert imported == "[]"


def test_the_executable_classifies_without_the_rest_of_the_cli(tmp_path):
    """`relaunch classify` (entry.py) gives the typer command's output, exit codes and errors without
    importing typer, rich (for --json), httpx, NATS or pydantic: its start-up is benchmarked."""
    import subprocess
    import sys
    log, missing = tmp_path / "x.log", tmp_path / "missing.log"
    log.write_text("step 1 loss 2.3\n" + OOM)
    probe = ("import sys; from relaunch.client.entry import main; sys.argv = ['relaunch', 'classify', '--json', "
             f"{str(log)!r}, {str(missing)!r}]\ntry:\n    main()\nexcept SystemExit as exit:\n    code = exit.code\n"
             "heavy = ('typer', 'rich', 'httpx', 'nats', 'pydantic', 'faststream')\n"
             "print(code, sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    first, last = out.stdout.splitlines()
    typer_result = RUNNER.invoke(app, ["classify", "--json", str(log), str(missing)])
    assert first == typer_result.stdout.splitlines()[0]
    assert last == "2 []" and typer_result.exit_code == 2
    assert f"cannot read {missing}" in out.stderr and f"cannot read {missing}" in typer_result.stderr


def test_the_executable_hands_help_and_other_commands_to_the_full_cli():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "from relaunch.client.entry import main; main()", "classify",
                          "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--signatures" in out.stdout and "--engine" in out.stdout
