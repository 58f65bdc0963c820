"""The slurmrestd token of the stack (SLURM_API=rest) stays secret: a 0600 file, never on a command
line, in a service's environment or in a log (docs/security.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurmjobs import job_fields, sbatch, wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("slurm_api", ["rest"], indirect=True)  # the CLI adapter has no token
def test_the_token_is_in_its_file_only(services, slurm_api):
    run = Path(services["RELAUNCH_RUN_DIR"])
    token_file = Path(services["RELAUNCH_SLURMRESTD_TOKEN_FILE"])
    assert token_file.stat().st_mode & 0o777 == 0o600
    token = token_file.read_text().strip().removeprefix("SLURM_JWT=")
    assert len(token) > 40
    # Some traffic first, so that a request logging its headers would have done so.
    job = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=2", STEP_SECONDS="0.2")
    wait_until("the job to complete", lambda: job_fields(job)["JobState"] == "COMPLETED", timeout=60)
    args = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert token not in args and token[:24] not in args
    for service in ("actuator", "watchdog"):
        pid = (run / "pids" / f"{service}.pid").read_text().strip()
        assert token[:24] not in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    logs = [p for p in [*run.glob("log/*"), *run.glob("slurm/log/*")] if p.is_file()]
    assert logs
    for log in logs:
        assert token[:24] not in log.read_text(errors="replace"), f"the token is in {log}"
