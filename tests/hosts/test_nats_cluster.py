"""NATS as a cluster (docs/reliability.md, "Faults between hosts"): the hosts tier's stack runs three NATS
servers, each in a network namespace of its own, and every stream and key-value bucket has three
replicas (RELAUNCH_NATS_SERVERS=3). During ROUNDS rounds of four one-node recoveries (a crash line, a
restart, then the job completes), a server is killed with SIGKILL at a random point of the round and
started again a random while later (seeded): in even rounds the leader of one of the streams a recovery
goes through, in odd rounds any server. Every recovery must end exactly once (Slurm's Restarts is 1 and
the job COMPLETED), with its anomaly and one converged Advice in the ledger, and afterwards every server
must hold the same messages.

The row goes to test-artifacts/reliability/hosts/nats-cluster.json, written before the assertions.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
from faults import record_hosts
from slurmjobs import job_fields, ledger, sbatch, stack, wait_until

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("RELAUNCH_NATS_CHAOS_SEED", "1803"))
ROUNDS = int(os.environ.get("RELAUNCH_NATS_CHAOS_ROUNDS", "6"))
JOBS_PER_ROUND = 4
STREAMS = ("SIGNALS", "EVENTS", "ADVICE")
"""The streams one recovery goes through: log lines and observations, the anomaly, the Advice."""


class Cluster:
    """The test stack's NATS servers, as scripts/stack.sh numbers them (1..3)."""

    def __init__(self, env: dict) -> None:
        self.env = env
        base = int(env["RELAUNCH_PORT_BASE"])
        hosts = [urlparse(u).hostname for u in env["RELAUNCH_NATS_URL"].split(",")]
        self.monitors = {i: f"http://{host}:{base + 822 + i - 1}" for i, host in enumerate(hosts, 1)}

    def jsz(self, server: int) -> dict:
        with urllib.request.urlopen(f"{self.monitors[server]}/jsz?streams=true", timeout=3) as reply:
            return json.load(reply)

    def healthy(self, server: int) -> bool:
        try:
            with urllib.request.urlopen(f"{self.monitors[server]}/healthz", timeout=3) as reply:
                return reply.status == 200
        except OSError:
            return False

    def streams(self, server: int) -> dict[str, dict]:
        return {s["name"]: s for a in self.jsz(server).get("account_details", []) for s in a.get("stream_detail", [])}

    def leader_of(self, stream: str) -> int:
        for server in self.monitors:
            try:
                leader = self.streams(server)[stream]["cluster"]["leader"]
            except (OSError, KeyError):
                continue
            return int(leader.removeprefix("n"))
        raise AssertionError(f"no server names a leader for {stream}")

    def kill(self, server: int) -> None:
        stack(self.env, "nats-kill", str(server))

    def start(self, server: int) -> None:
        stack(self.env, "nats-start", str(server))

    def all_healthy(self) -> bool:
        return all(self.healthy(i) for i in self.monitors)

    def same_messages(self) -> dict | None:
        """stream -> (messages, last sequence) when every server holds the same, else None."""
        seen = {}
        for server in self.monitors:
            for name, detail in self.streams(server).items():
                state = (detail["state"]["messages"], detail["state"]["last_seq"])
                if seen.setdefault(name, state) != state:
                    return None
        return seen


def _through(job: str, seen: dict[str, dict]) -> bool:
    """The job is done with: completed, or ended after its restart (not the failed first attempt, which
    ends before relaunch requeues it). Its fields are kept in `seen` as they were last read: slurmctld
    forgets a finished job MinJobAge (300 s) after it ended, and a slow run's first rounds end earlier."""
    if job in seen and _ended(seen[job]):
        return True
    seen[job] = fields = job_fields(job)
    return _ended(fields)


def _ended(fields: dict) -> bool:
    return fields["JobState"] == "COMPLETED" or (
        fields["JobState"] in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") and fields["Restarts"] != "0")


def _epoch(text: str, marker: str) -> float | None:
    found = re.search(rf"{marker}=(\d+\.\d+)", text)
    return float(found[1]) if found else None


def _stats(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 2), "p95": round(ordered[max(0, round(0.95 * len(ordered)) - 1)], 2),
            "max": round(ordered[-1], 2)}


def test_recoveries_end_exactly_once_while_nats_servers_die(services):
    if "," not in services["RELAUNCH_NATS_URL"]:
        pytest.skip("the stack runs one NATS server (RELAUNCH_NATS_SERVERS=3 makes the cluster)")
    cluster = Cluster(services)
    rng = random.Random(SEED)
    wait_until("every NATS server healthy", cluster.all_healthy, timeout=60)
    jobs: list[str] = []
    faults: list[str] = []
    seen: dict[str, dict] = {}
    started = time.monotonic()
    for round_ in range(ROUNDS):
        stream = STREAMS[(round_ // 2) % len(STREAMS)]
        victim = cluster.leader_of(stream) if round_ % 2 == 0 else rng.choice(sorted(cluster.monitors))
        kill_after, down_for = rng.uniform(0.0, 3.0), rng.uniform(1.0, 5.0)
        batch = [sbatch(services, "flaky-train.sh", "relaunch:max_attempts=3", "--nodes=1", STEP_SECONDS="0.3")
                 for _ in range(JOBS_PER_ROUND)]
        jobs += batch
        time.sleep(kill_after)
        cluster.kill(victim)
        time.sleep(down_for)
        cluster.start(victim)
        what = f"the leader of {stream}" if round_ % 2 == 0 else "a random server"
        faults.append(f"round {round_ + 1}: n{victim} ({what}) killed {kill_after:.1f} s into the round, "
                      f"started again {down_for:.1f} s later")
        try:  # each job through: completed, or ended again after its restart (a failure, counted below)
            wait_until(f"round {round_ + 1}'s jobs to end", lambda b=batch: all([_through(j, seen) for j in b]),
                       timeout=120)
        except AssertionError as exc:
            states = ", ".join(f"{j} {seen[j]['JobState']} Restarts={seen[j]['Restarts']}" for j in batch if j in seen)
            faults.append(f"round {round_ + 1}: {exc} ({states})")
        print(f"round {round_ + 1} over at {time.monotonic() - started:.0f} s", flush=True)
        wait_until("every NATS server healthy again", cluster.all_healthy, timeout=60)

    outcomes, recovery_s, lost = [], [], []
    for job in jobs:
        try:  # as Slurm has it now, while it still knows the job; else as last read
            fields = seen[job] = job_fields(job)
        except subprocess.CalledProcessError:
            fields = seen[job]
        record = wait_until(f"job {job}'s converged Advice in the ledger",
                            lambda j=job: (r := ledger(j)) and r.get("advice") and r["advice"][-1]["status"]
                            in ("CONVERGED", "ABANDONED", "EXPIRED") and r, timeout=30)
        out = (Path(services["RELAUNCH_RUN_DIR"]) / "jobs" / f"flaky-train-{job}.out").read_text(errors="replace")
        crashed, again = _epoch(out, "crashing at"), [float(t) for t in re.findall(r"started_at=(\d+\.\d+)", out)]
        if crashed is not None and len(again) >= 2:
            recovery_s.append(again[1] - crashed)
        ok = (fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1" and len(record["advice"]) == 1
              and record["advice"][0]["status"] == "CONVERGED" and len(record.get("anomalies", [])) >= 1)
        outcomes.append(ok)
        if not record.get("anomalies") or not record.get("advice"):
            lost.append(job)
        if not ok:
            print(f"job {job}: {fields['JobState']} Restarts={fields['Restarts']}, advice "
                  f"{[(a['generation'], a['status']) for a in record['advice']]}, anomalies {len(record['anomalies'])}")
    same = wait_until("every server to hold the same messages", cluster.same_messages, timeout=60)
    row = {"trials": len(jobs), "recoveries": sum(outcomes), "exactly_once": sum(outcomes), "lost": len(lost),
           "running_again_s": _stats(recovery_s) if recovery_s else None,
           "notes": [f"seed {SEED}; 3 NATS servers, each in a namespace of its own, streams and buckets R3; "
                     f"{ROUNDS} rounds of {JOBS_PER_ROUND} one-node recoveries; running again is from the crash "
                     "line to the next attempt's first line", *faults,
                     "afterwards every server held the same messages: " + ", ".join(
                         f"{name} {count} (last seq {last})" for name, (count, last) in sorted(same.items()))]}
    record_hosts("nats-cluster", "NATS servers of a 3-server R3 cluster killed during recoveries (the stream "
                 "leader, then a random server)", **row)
    print(json.dumps(row))
    assert not lost, lost
    assert all(outcomes), row
    assert len(jobs) >= 20
