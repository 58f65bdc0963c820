"""A partitioned actuator (docs/reliability.md, "Faults between hosts"). Two actuators, each reaching
NATS and slurmctld through a relay the test can partition (tests/hosts/partition.py: a cut holds
every connection open and passes nothing, as a dropped link does):

1. the leader loses NATS (not Slurm) in the middle of a reconcile: its lease lapses, the standby takes
   over and converges the Advice; back on NATS, the first neither acts twice nor takes the lease back;
2. then the leader keeps NATS and loses slurmctld: it steps down, the other converges.

Every recovery must end with Slurm's Restarts=1, one requeue, one release.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
from faults import record_hosts
from partition import Partitionable
from slurmjobs import job_fields, ledger, stack, wait_until

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent


class Actuator:
    """One actuator process whose NATS and slurmctld connections go through relays."""

    def __init__(self, env: dict, name: str) -> None:
        run = Path(env["RELAUNCH_RUN_DIR"])
        nats = urlparse(env["RELAUNCH_NATS_URL"].split(",")[0])  # one server: the relay is all it knows
        conf = (run / "slurm" / "slurm.conf").read_text()
        ctld_host = re.search(r"^SlurmctldHost=localhost(?:\((?P<addr>[^)]+)\))?", conf, re.M)["addr"] or "127.0.0.1"
        ctld_port = int(re.search(r"^SlurmctldPort=(\d+)", conf, re.M)[1])
        self.nats = Partitionable((nats.hostname, nats.port))
        self.slurm = Partitionable((ctld_host, ctld_port))
        own_conf = run / f"slurm-{name}.conf"
        own_conf.write_text(re.sub(r"^SlurmctldPort=\d+", f"SlurmctldPort={self.slurm.port}",
                                   re.sub(r"^SlurmctldHost=.*$", "SlurmctldHost=localhost(127.0.0.1)", conf,
                                          flags=re.M), flags=re.M))
        self.log = run / "log" / f"actuator-{name}.log"
        self.name = name
        child = {**os.environ, "RELAUNCH_NATS_URL": f"nats://127.0.0.1:{self.nats.port}", "SLURM_CONF": str(own_conf),
                 "RELAUNCH_NATS_USER": "actuator", "RELAUNCH_NATS_PASSWORD_FILE": str(run / "creds" / "actuator.pass"),
                 "RELAUNCH_ACTUATOR_INSTANCE": name, "RELAUNCH_ACTUATOR_HEALTH_PORT": str(_free_port())}
        self.proc = subprocess.Popen([sys.executable, "-m", "relaunch.actuator"], env=child,
                                     stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)

    def said(self, text: str) -> int:
        return self.log.read_text(errors="replace").count(text) if self.log.exists() else 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.nats.close()
        self.slurm.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def submit(env: dict) -> str:
    jobs = Path(env["RELAUNCH_RUN_DIR"]) / "jobs"
    jobs.mkdir(exist_ok=True)
    out = subprocess.run(["sbatch", "--parsable", "--comment=relaunch:max_attempts=2", "-o",
                          str(jobs / "%x-%j.out"), str(HERE / "stubborn.sh")],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().split(";")[0]


def audited(job: str, action: str) -> int:
    return sum(1 for a in ledger(job).get("audit", []) if a["service"] == "actuator" and a["action"] == action)


@pytest.fixture
def two_actuators(services):
    """The stack's actuator stopped; A started first (the leader), then B (the standby)."""
    pid = Path(services["RELAUNCH_RUN_DIR"]) / "pids" / "actuator.pid"
    os.kill(int(pid.read_text()), signal.SIGTERM)  # it steps down from the lease as it goes
    wait_until("the stack's actuator to stop", lambda: not Path(f"/proc/{pid.read_text().strip()}").exists(), 20)
    a = Actuator(services, "act-a")
    wait_until("A to lead", lambda: a.said("is now the leader"), timeout=60)
    b = Actuator(services, "act-b")
    wait_until("B to start", lambda: b.said("starting in act mode"), timeout=60)
    yield a, b
    a.stop()
    b.stop()
    stack(services, "services-up")


def test_a_partitioned_actuator_neither_acts_twice_nor_fights_the_new_leader(services, two_actuators):
    a, b = two_actuators
    # 1. The leader loses NATS right after its requeue, while Slurm holds the job COMPLETING (KillWait).
    job = submit(services)
    wait_until("A's requeue", lambda: audited(job, "requeuehold") == 1, timeout=90)
    cut_at = time.time()
    a.nats.cut()
    done = wait_until("B to converge the Advice", lambda: (f := job_fields(job))["JobState"] == "COMPLETED" and f,
                      timeout=120)
    took = time.time() - cut_at
    a.nats.heal()
    time.sleep(12)  # A reconnects and renews nothing: B holds the lease
    steps = {s: audited(job, s) for s in ("requeuehold", "release", "start_now")}
    took_back = a.said("is now the leader") > 1
    record_hosts("partition-actuator-nats", "the leading actuator loses NATS (not Slurm) right after its requeue",
                 trials=1, recoveries=int(done["Restarts"] == "1"), exactly_once=int(steps["requeuehold"] == 1),
                 lost=0, running_again_s={"median": round(took, 1), "p95": round(took, 1), "max": round(took, 1)},
                 notes=[f"steps audited {steps}; B took the lease: {bool(b.said('is now the leader'))}; A took it "
                        f"back after the partition healed: {took_back}; completed {took:.0f} s after the cut"])
    assert done["Restarts"] == "1" and steps["requeuehold"] == 1 and steps["release"] <= 1, steps
    assert b.said("is now the leader") == 1 and not took_back

    # 2. The new leader (B) keeps NATS and loses slurmctld: it steps down, A carries on.
    b.slurm.cut()
    cut_at = time.time()
    job2 = submit(services)
    done2 = wait_until("A to converge the second Advice",
                       lambda: (f := job_fields(job2))["JobState"] == "COMPLETED" and f, timeout=180)
    took2 = time.time() - cut_at
    b.slurm.heal()
    steps2 = {s: audited(job2, s) for s in ("requeuehold", "release", "start_now")}
    record_hosts("partition-actuator-slurm", "the leading actuator keeps NATS and loses slurmctld",
                 trials=1, recoveries=int(done2["Restarts"] == "1"), exactly_once=int(steps2["requeuehold"] == 1),
                 lost=0, running_again_s={"median": round(took2, 1), "p95": round(took2, 1), "max": round(took2, 1)},
                 notes=[f"steps audited {steps2}; B stepped down: {bool(b.said('steps down'))}; A led again: "
                        f"{a.said('is now the leader') == 2}; completed {took2:.0f} s after the cut"])
    assert b.said("steps down") >= 1 and a.said("is now the leader") == 2
    assert done2["Restarts"] == "1" and steps2["requeuehold"] == 1, steps2
