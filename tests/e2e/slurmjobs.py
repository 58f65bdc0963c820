"""Submitting and watching jobs on the test stack's Slurm cluster, for the end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from relaunch.actuator.domain.observing import parse_scontrol_line

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"


def sbatch(env: dict, script: str, comment: str, *args: str, **job_env: str) -> str:
    """Submit examples/<script>; `args` are extra sbatch options, `job_env` the job's environment."""
    jobs = Path(env["RELAUNCH_RUN_DIR"]) / "jobs"
    jobs.mkdir(exist_ok=True)
    out = subprocess.run(
        ["sbatch", "--parsable", f"--comment={comment}", "--open-mode=append", "-o", str(jobs / "%x-%j.out"),
         *args, str(REPO / "examples" / script)],
        check=True, capture_output=True, text=True, env={**os.environ, **job_env},
    )
    return out.stdout.strip().split(";")[0]


_LAST_SEEN: dict[str, dict[str, str]] = {}
"""The last `job_fields` read of each job (its main fields), so that a wait that runs out says what it saw."""
BRIEF = ("JobState", "Reason", "Restarts", "NodeList", "ExcNodeList", "ExitCode")


def job_fields(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], check=True, capture_output=True, text=True)
    fields = parse_scontrol_line(out.stdout)
    _LAST_SEEN[job_id] = {k: fields[k] for k in BRIEF if k in fields}
    return fields


def wait_until(what, predicate, timeout=60.0):
    """Poll `predicate` until it gives something true; a wait that runs out says what it waited for and the last
    state of each job the predicate read meanwhile (issue 38: a failure read from CI's tail must say what it saw)."""
    end = time.monotonic() + timeout
    _LAST_SEEN.clear()
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    seen = "; ".join(f"job {job}: " + ", ".join(f"{k}={v}" for k, v in fields.items())
                     for job, fields in _LAST_SEEN.items())
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last seen: {seen})" if seen else ""))


def ledger(job_id: str) -> dict:
    """`relaunch jobs show JOBID --json` (contract), or {} while the job is not in the ledger."""
    # As the operator: with the stack's API token, so that the log lines quoted as evidence are shown
    # (without it the API withholds them: docs/security.md). The suite's own environment leaves the token
    # out on purpose (tests/conftest.py), so it is named here.
    token = Path(os.environ.get("RELAUNCH_RUN_DIR", "")) / "api-token"
    env = {**os.environ, "RELAUNCH_API_TOKEN_FILE": str(token)} if token.is_file() else None
    out = subprocess.run([str(VENV_BIN / "relaunch"), "jobs", "show", job_id, "--json"], capture_output=True,
                         text=True, env=env)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout) if out.returncode == 0 else {}


def clear_node(node: str, reason: str) -> None:
    """`relaunch nodes clear NODE` as the operator after a repair (docs/policy.md, "Forgetting a repaired node"):
    the decider no longer counts the node's exclusions by earlier jobs. Tests that fault nodes on purpose clear them
    afterwards; otherwise their exclusions are node history that leaves the node out of the next test's jobs."""
    token = Path(os.environ.get("RELAUNCH_RUN_DIR", "")) / "api-token"
    out = subprocess.run([str(VENV_BIN / "relaunch"), "nodes", "clear", node, "--reason", reason],
                         capture_output=True, text=True, env={**os.environ, "RELAUNCH_API_TOKEN_FILE": str(token)})
    assert out.returncode == 0, f"relaunch nodes clear {node}: {out.stdout}{out.stderr}"


def stack(env: dict, *args: str, service_env: dict | None = None) -> None:
    """scripts/stack.sh against the test stack (e.g. services-up starts whatever is not running);
    `service_env` goes to the services it starts (their RELAUNCH_* settings)."""
    keep = {k: env[k] for k in ("RELAUNCH_RUN_DIR", "RELAUNCH_PORT_BASE", "RELAUNCH_CLUSTER")}
    subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), *args], check=True, timeout=120,
                   env={**os.environ, **keep, "RELAUNCH_WATCHDOG_BOUND_S": "15", "RELAUNCH_WATCHDOG_INTERVAL_S": "1",
                        **(service_env or {})})


def kill9(env: dict, service: str) -> None:
    """SIGKILL a service of the test stack, as a crash would (no clean-up, no lease step-down)."""
    pid_file = Path(env["RELAUNCH_RUN_DIR"]) / "pids" / f"{service}.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, 9)
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/status") as fh:
                if any(line.startswith("State:") and "Z" in line for line in fh):
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)


def wait_for_the_actuator_to_lead(env: dict, timeout: float = 30.0) -> None:
    """Until the stack's actuator (the last one started) holds the lease, so that its observer reports a
    job from its start: a test that restarted the actuator would otherwise have the job's first lines
    read in one batch, which teaches the hang watch no step interval."""
    path = Path(env["RELAUNCH_RUN_DIR"]) / "log" / "actuator.log"

    def leads() -> bool:
        text = path.read_text(errors="replace") if path.exists() else ""
        started = text.rfind(" starting in ")
        return started >= 0 and "is now the leader" in text[started:]

    wait_until("the actuator to hold the lease", leads, timeout)
