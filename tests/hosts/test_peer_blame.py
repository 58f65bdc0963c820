"""The culprit host (issue 36, item 6), in the hosts topology where each node has an address of its own:

- a host of a running two-host job is cut off: the job is restarted without that host and never without
  the one that survived (Slurm's "*** STEP ... ON <survivor> CANCELLED AT ... DUE TO NODE FAILURE" names
  the survivor; the failed node is the silent, down one);
- a job whose log names its failed peer by address (NCCL's `Got completion from peer <addr><port>`,
  printed on the other host) is restarted without the peer's node, found through Slurm's NodeAddr
  (JobObserved.node_addrs), never without the node that printed the line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from slurmjobs import job_fields, ledger, stack, wait_until
from test_lost_node import cancel, every_probe_heard, iterations, restore, running_again_without, running_on_two, stack_env, submit

from relaunch.actuator.domain.hostlists import expand

pytestmark = pytest.mark.e2e

PEER_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --job-name=ncclpeer
# The first attempt fails as NCCL does when its peer is gone, printed on this (the batch) host; the next runs on.
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then
  for _ in $(seq 100); do [ -s {peer_file} ] && break; sleep 0.2; done  # the test writes the peer's address
  echo "$SLURMD_NODENAME:4321:4350 [0] transport/net_ib.cc:2034 NCCL WARN NET/IB : Got completion from peer $(cat {peer_file})<43210> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
  sleep 2
  exit 1
fi
exec sleep 600
"""


def node_addr(node: str) -> str:
    out = subprocess.run(["scontrol", "show", "node", "-o", node], check=True, capture_output=True, text=True).stdout
    return next(t.split("=", 1)[1] for t in out.split() if t.startswith("NodeAddr="))


def test_a_cut_host_is_left_out_never_the_host_that_survived(services):
    job = submit(services)
    nodes = wait_until("the job on two hosts", lambda: running_on_two(job), timeout=60)
    wait_until("steady progress", lambda: iterations(services, job) >= 15, timeout=60)
    survivor, victim = nodes  # the batch host survives: its slurmstepd prints the NODE FAILURE line
    every_probe_heard(services)
    stack(stack_env(services), "cut", victim)
    try:
        moved = running_again_without(services, job, nodes, victim, f"the job running again without {victim}")
        record = wait_until("the ledger", lambda: (r := ledger(job)) and r["advice"] and r["anomalies"] and r)
    finally:
        cancel(job)
        restore(stack_env(services), [victim])
    advice = record["advice"][0]
    assert advice["exclude_nodes"] == [victim], advice
    assert survivor not in expand(moved.get("ExcNodeList", "") or ""), moved
    assert all(survivor not in a["nodes"] for a in record["anomalies"]), record["anomalies"]


def test_the_peer_an_nccl_error_names_by_address_is_left_out_not_the_host_that_printed_it(services):
    jobs = Path(services["RELAUNCH_RUN_DIR"]) / "jobs"
    jobs.mkdir(exist_ok=True)
    peer_file = jobs / f"peer-{os.getpid()}"
    peer_file.write_text("")  # the peer's address, written once the job's nodes are known
    script = jobs / f"ncclpeer-{os.getpid()}.sh"
    # The line names the host it was printed on as NCCL does (host:pid:tid), and its peer by address.
    script.write_text(PEER_SCRIPT.format(peer_file=peer_file))
    out = subprocess.run(["sbatch", "--parsable", "--comment=relaunch:max_attempts=3", "-o", str(jobs / "%x-%j.out"),
                          str(script)], check=True, capture_output=True, text=True)
    job = out.stdout.strip().split(";")[0]
    try:
        fields = wait_until("the job on two hosts", lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f,
                            timeout=60)
        printer, peer = expand(fields["NodeList"])
        peer_file.write_text(node_addr(peer))
        moved = wait_until(f"the job running again without {peer}",
                           lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f["Restarts"] == "1" and f,
                           timeout=120)
        record = wait_until("the ledger", lambda: (r := ledger(job)) and r["advice"] and r)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    (anomaly,) = [a for a in record["anomalies"] if a["source"] == "log"]
    assert anomaly["category"] == "nccl_network_error" and anomaly["nodes"] == [peer], anomaly
    assert record["advice"][0]["exclude_nodes"] == [peer], record["advice"]
    assert peer in expand(moved["ExcNodeList"]) and printer not in expand(moved["ExcNodeList"]), moved
