"""A node of a running two-host job is cut (its link down) or frozen (every process of that host
stopped): relaunch restarts the job without it within 15 s of the cut, naming the node and the
evidence, long before Slurm's SlurmdTimeout (300 s here). A probe that falls silent while its job keeps
going is reported, never acted on; a cut of every node of the job at once blames no node alone.

Each fault's row goes to test-artifacts/reliability/hosts/<name>.json (docs/reliability.md, "Faults
between hosts"; `make reliability` renders it), written before the assertions.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from faults import record_hosts
from slurmjobs import REPO, clear_node, job_fields, ledger, stack, wait_until

from relaunch.actuator.domain.hostlists import expand

pytestmark = pytest.mark.e2e

TRIALS = int(os.environ.get("RELAUNCH_LOST_NODE_TRIALS", "10"))
TARGET_S = 15.0
HERE = Path(__file__).resolve().parent


def submit(env: dict, comment: str = "relaunch:max_attempts=3") -> str:
    jobs = Path(env["RELAUNCH_RUN_DIR"]) / "jobs"
    jobs.mkdir(exist_ok=True)
    out = subprocess.run(
        ["sbatch", "--parsable", f"--comment={comment}", "--open-mode=append", "-o", str(jobs / "%x-%j.out"),
         str(HERE / "pingpong.sh")], check=True, capture_output=True, text=True,
        env={**os.environ, "PINGPONG_PY": str(REPO / ".venv" / "bin" / "python"), "PINGPONG_DIR": str(HERE),
             "PINGPONG_RDV": str(jobs)})
    return out.stdout.strip().split(";")[0]


def iterations(env: dict, job: str) -> int:
    path = Path(env["RELAUNCH_RUN_DIR"]) / "jobs" / f"pingpong-{job}.out"
    return path.read_text(errors="replace").count(" iteration ") if path.exists() else 0


def probes_silent(env: dict) -> float | None:
    """relaunch_probe_silent_nodes on the detector's /metrics (docs/operator-guide.md): how many nodes' gpu-probes
    it has not heard for two heartbeat intervals; None while it does not answer."""
    port = int(env["RELAUNCH_PORT_BASE"]) + 91  # scripts/stack/config.sh: HEALTH_DETECTOR
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return next((float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith("relaunch_probe_silent_nodes ")), None)


def every_probe_heard(env: dict) -> None:
    """A host fault starts from a stack whose probes are all heard. One CI run cut a host whose probe's publishes had
    already stalled for 6 s (the bus still settling after the previous test's faults) while its job kept
    stepping: relaunch rightly took that for a probe alone, and the cut became a compound fault the test does not
    describe."""
    wait_until("the detector to hear every node's gpu-probe (relaunch_probe_silent_nodes 0)",
               lambda: probes_silent(env) == 0, timeout=60)


def explain(env: dict, job: str, nodes: list[str]) -> str:
    """What relaunch saw and did about `job`, for a host-fault test whose wait ran out (issue 38, item 3: CI keeps
    only its output, not the stack's logs): the ledger's anomalies, Advice and hang evidence, the detector's lines
    about the job's nodes, and the errors in those nodes' gpu-probe logs."""
    record = ledger(job)
    lines = [f"relaunch on job {job}:"]
    lines += [f"  anomaly {a.get('category')} on {a.get('nodes')} at {a.get('detected_at')}: {a.get('summary')}"
              for a in record.get("anomalies") or []]
    lines += [f"  advice {a.get('generation')} {a.get('operation')} excluding {a.get('exclude_nodes')}: {a.get('reason')}"
              for a in record.get("advice") or []]
    lines += [f"  hang evidence {h.get('status')} blame {h.get('blame')} suspects {h.get('suspect_nodes')}: "
              f"{h.get('reason')} {h.get('detail')}" for h in record.get("hang_evidence") or []]
    lines += [f"  audit {a.get('at')} {a.get('service')} {a.get('action')}: {a.get('detail')}"
              for a in record.get("audit") or []]
    log = Path(env["RELAUNCH_RUN_DIR"]) / "log"
    detector = (log / "detector.log").read_text(errors="replace").splitlines() if (log / "detector.log").exists() else []
    about = [line for line in detector if any(f"{n}:" in line for n in nodes) or f".{job}." in line]
    lines += ["detector (last 12 lines about these nodes or the job):"] + ["  " + line[:400] for line in about[-12:]]
    for node in nodes:
        probe = log / f"gpu-probe-{node}.log"
        text = probe.read_text(errors="replace").splitlines() if probe.exists() else []
        lines += [f"gpu-probe {node} (last 5 warnings):"] + ["  " + line[:300] for line in
                                                            [t for t in text if " WARNING " in t or " ERROR " in t][-5:]]
    return "\n".join(lines)


def running_again_without(env: dict, job: str, nodes: list[str], victim: str, what: str) -> dict:
    """The job's fields once it runs again (restart 1) without `victim`; a wait that runs out says what relaunch saw."""
    try:
        return wait_until(what, lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f["Restarts"] == "1"
                          and victim not in expand(f["NodeList"]) and f, timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{explain(env, job, nodes)}") from None


def running_on_two(job: str) -> list[str]:
    fields = job_fields(job)
    nodes = expand(fields.get("NodeList", "")) if fields["JobState"] == "RUNNING" else []
    return nodes if len(nodes) == 2 else []


def node_state(node: str) -> str:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def restore(env: dict, nodes: list[str], how: str = "cut") -> None:
    """Undo the fault and give the nodes back to Slurm (an operator's resume after the repair)."""
    stack(env, "heal" if how == "cut" else "thaw", *nodes)
    for node in nodes:
        wait_until(f"{node}'s slurmd to answer again", lambda n=node: _resume(n), timeout=_answer_wait_s())
        clear_node(node, f"{how} repaired")  # its exclusion is history the next trial's job must not inherit


def _answer_wait_s() -> float:
    """How long a repaired node may take to answer: slurmctld hears a node marked not responding again at
    its next ping, which comes every SlurmdTimeout/3 (100 s with the default 300 s), not at once; a fixed
    60 s ran out on a busy CI machine (issue 38, item 3). One ping interval and a half, at least 60 s."""
    try:
        timeout = float(_config("SlurmdTimeout").split()[0])
    except ValueError:
        timeout = 300.0
    return max(60.0, 1.5 * timeout / 3)


def _resume(node: str) -> bool:
    state = node_state(node)
    if "down" in state or "drain" in state:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], capture_output=True)
        return False
    return state in ("idle", "mixed", "allocated") and "*" not in state


def cancel(job: str) -> None:
    subprocess.run(["scancel", job], capture_output=True)
    wait_until(f"job {job} to end", lambda: job_fields(job)["JobState"] in ("CANCELLED", "COMPLETED", "FAILED"),
               timeout=60)


def stack_env(env: dict) -> dict:
    return {**env, "RELAUNCH_TOPOLOGY": "hosts"}


def test_a_cut_of_every_node_of_the_job_blames_none_of_them(services):
    """A whole-rack cut: nothing says which node is at fault, so none is left out; the job waits (held in
    COMPLETING by the unreachable nodes) and runs again once they are back, on nodes Slurm picks."""
    job = submit(services)
    nodes = wait_until("the job on two hosts", lambda: running_on_two(job), timeout=60)
    wait_until("steady progress", lambda: iterations(services, job) >= 15, timeout=60)
    every_probe_heard(services)
    cut_at = time.time()
    # Both in one call: one after the other, a busy machine's start-up of stack.sh could put a heartbeat
    # interval between the cuts, and the node cut second would then be "still heard" after the first.
    stack(stack_env(services), "cut", *nodes)
    record = wait_until("the lost-node anomaly", lambda: (r := ledger(job)) and r["advice"] and r, timeout=40)
    anomaly = next(a for a in record["anomalies"] if a["category"] == "node_lost")
    detected = _epoch(anomaly["detected_at"]) - cut_at
    time.sleep(5)  # held while the nodes are away: nothing else happens
    held = job_fields(job)
    restore(stack_env(services), nodes)
    again = wait_until("the job to run again after the repair",
                       lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f["Restarts"] == "1" and f,
                       timeout=90)
    excluded = again.get("ExcNodeList", "(null)")
    record_hosts("whole-rack-cut", "every node of a running two-host job cut at once (a whole-rack cut)", trials=1,
                 recoveries=int(excluded in ("", "(null)")), exactly_once=int(len(ledger(job)["advice"]) == 1),
                 lost=0, detected_s=_stats([detected]),
                 notes=[f"anomaly nodes {anomaly['nodes']}, Advice excluded {record['advice'][0]['exclude_nodes']}; "
                        f"while cut the job stayed {held['JobState']} ({held.get('Reason')}); after the repair it "
                        f"ran again on {again['NodeList']} with ExcNodeList {excluded}"])
    assert anomaly["nodes"] == [] and "every node of the job went silent at once" in anomaly["summary"]
    assert record["advice"][0]["exclude_nodes"] == []
    assert excluded in ("", "(null)")
    cancel(job)


def test_a_silent_probe_on_a_working_host_is_reported_not_acted_on(services):
    job = submit(services)
    nodes = wait_until("the job on two hosts", lambda: running_on_two(job), timeout=60)
    wait_until("steady progress", lambda: iterations(services, job) >= 15, timeout=60)
    pid_file = Path(services["RELAUNCH_RUN_DIR"]) / "pids" / f"gpu-probe-{nodes[1]}.pid"
    os.kill(int(pid_file.read_text()), 9)
    before = iterations(services, job)
    time.sleep(12)  # four heartbeat intervals past the silence threshold
    fields = job_fields(job)
    acted = bool(ledger(job).get("anomalies")) or fields["Restarts"] != "0"
    record_hosts("probe-silent", "a gpu-probe SIGKILLed while its host and job keep working (12 s)", trials=1,
                 recoveries=int(not acted), exactly_once=int(not acted), lost=0,
                 notes=["reported in the detector's log, not acted on" if not acted else "ACTED ON a working host"])
    assert fields["JobState"] == "RUNNING" and fields["Restarts"] == "0", fields
    assert iterations(services, job) > before + 20
    assert not ledger(job).get("anomalies"), ledger(job)
    log = (Path(services["RELAUNCH_RUN_DIR"]) / "log" / "detector.log").read_text()
    assert f"{nodes[1]}: no gpu-probe heartbeat" in log and "the probe alone is silent" in log
    stack(stack_env(services), "services-up")  # the probe again
    cancel(job)


def _trial(services, how: str, victim_of) -> dict:
    """One host fault on a fresh two-host job: the times from the fault to the anomaly and to the job
    running again without that host, after checking what the ledger says."""
    job = submit(services)
    nodes = wait_until("the job on two hosts", lambda: running_on_two(job), timeout=60)
    wait_until("steady progress", lambda: iterations(services, job) >= 15, timeout=60)
    victim = victim_of(nodes)
    every_probe_heard(services)
    cut_at = time.time()
    stack(stack_env(services), how, victim)
    moved = running_again_without(services, job, nodes, victim, f"{how} {victim}: the job running again without it")
    running_at = time.time()
    record = wait_until("the ledger", lambda: (r := ledger(job)) and r["advice"] and r["anomalies"] and r)
    (anomaly,) = [a for a in record["anomalies"] if a["category"] == "node_lost"]
    advice = record["advice"][0]
    row = {"fault": how, "node": victim, "job": job, "batch_host": victim == nodes[0],
           "detected_s": round(_epoch(anomaly["detected_at"]) - cut_at, 2),
           "released_s": _released_s(record, cut_at),
           "running_again_s": round(running_at - cut_at, 2), "advice": len(record["advice"])}
    cancel(job)
    if how == "kill":
        stack(stack_env(services), "revive", victim)
        wait_until(f"{victim}'s slurmd to answer again", lambda: _resume(victim), timeout=_answer_wait_s())
        clear_node(victim, "revived")
    else:
        restore(stack_env(services), [victim], how)
    assert anomaly["nodes"] == [victim] and victim in advice["exclude_nodes"], (anomaly, advice)
    assert f"{victim}: no gpu-probe heartbeat" in anomaly["summary"]
    assert any(ref.startswith(f"node:{victim}:") and ":lost: " in ref for ref in advice["evidence_refs"])
    assert victim in moved["ExcNodeList"] and row["advice"] == 1
    return row


def _released_s(record: dict, cut_at: float) -> float | None:
    """Seconds from the cut to relaunch's last step on Slurm (releasing the held successor, or starting it
    now): what follows is Slurm's (the old step's end, KillWait, a scheduler pass). Reported beside the
    totals to tell relaunch's share of a slow trial from Slurm's on a busy machine (issue 38, item 3)."""
    steps = [_epoch(a["at"]) for a in record.get("audit", [])
             if a.get("service") == "actuator" and a.get("action") in ("release", "start_now")]
    return round(max(steps) - cut_at, 2) if steps else None


def _row(rows: list[dict]) -> dict:
    timeout = int(os.environ.get("RELAUNCH_SLURMD_TIMEOUT", "300"))
    return {"trials": len(rows), "recoveries": len(rows), "exactly_once": sum(r["advice"] == 1 for r in rows),
            "lost": 0, "slurmd_timeout_s": timeout, "detected_s": _stats([r["detected_s"] for r in rows]),
            "released_s": _stats(released) if (released := [r["released_s"] for r in rows
                                                           if r.get("released_s") is not None]) else None,
            "running_again_s": _stats([r["running_again_s"] for r in rows]), "rows": rows}


def test_a_lost_host_is_left_out_within_15_s_of_the_cut(services):
    """The cut host is the job's batch host in some trials (seeded): Slurm then keeps the job COMPLETING
    until the surviving host's slurmstepd gives up telling srun (on the lost host) that its tasks
    ended, after Slurm's MessageTimeout: that case gets MessageTimeout more (reported apart)."""
    rng = random.Random(1812)
    rows = [_trial(services, "cut", lambda nodes: nodes[0 if rng.random() < 0.3 else 1]) for _ in range(TRIALS)]
    summary = _row(rows)
    other = [r["running_again_s"] for r in rows if not r["batch_host"]]
    batch = [r["running_again_s"] for r in rows if r["batch_host"]]
    message_timeout = float(_config("MessageTimeout").split()[0])
    summary["notes"] = [
        f"seed 1812; SlurmdTimeout {summary['slurmd_timeout_s']} s, KillWait {_config('KillWait')}, MessageTimeout "
        f"{message_timeout:g} s. Another host than the batch host cut ({len(other)} trials): running again "
        f"{_span(other)}; once the lost host is DOWN the surviving host's step ends within KillWait. The batch "
        f"host cut ({len(batch)} trials): {_span(batch)}; the surviving host's slurmstepd waits MessageTimeout "
        "for srun on the lost host before its step ends (Slurm's clean-up; relaunch has marked the node DOWN "
        "by then)"]
    record_hosts("lost-host-cut", "a host of a running two-host job cut (its link down): restarted without it",
                 **summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    assert all(r["detected_s"] <= 8 for r in rows), rows
    assert other and _stats(other)["p95"] <= TARGET_S, summary
    assert all(t <= TARGET_S + message_timeout + 2 for t in batch), summary


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_a_killed_or_frozen_batch_host_is_left_out(services, how):
    """Every process of the job's batch host killed (its kernel answers: connections are refused at
    once), or stopped (its kernel still accepts connections that nobody answers): found as fast; a
    frozen host keeps the surviving host's step waiting on Slurm's own message timeouts toward it."""
    row = _trial(services, how, lambda nodes: nodes[0])
    summary = _row([row])
    summary["notes"] = [f"detected {row['detected_s']} s after the fault, the node marked DOWN at once; the job "
                        f"ran again {row['running_again_s']} s after it"
                        + (" (the surviving host's slurmstepd retries MESSAGE_TASK_EXIT to the frozen srun until "
                           "Slurm's MessageTimeout passes: Slurm's clean-up, not relaunch's)" if how == "freeze" else "")]
    record_hosts(f"lost-host-{how}", f"the batch host of a running two-host job {'killed (every process)' if how == 'kill' else 'frozen (every process stopped)'}",
                 **summary)
    assert row["detected_s"] <= 8, row
    if how == "kill":
        assert row["running_again_s"] <= TARGET_S + float(_config("MessageTimeout").split()[0]) + 2, row


def _config(key: str) -> str:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True)
    return next((line.split("=", 1)[1].strip() for line in out.stdout.splitlines() if line.startswith(key)), "?")


def _span(values: list[float]) -> str:
    if not values:
        return "none"
    s = _stats(values)
    return f"median {s['median']:.1f} s, p95 {s['p95']:.1f} s, max {s['max']:.1f} s"


def _epoch(text: str) -> float:
    import datetime as dt
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _stats(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    p95 = values[min(len(values) - 1, max(0, round(0.95 * len(values) + 0.5) - 1))]
    return {"median": round(statistics.median(values), 2), "p95": round(p95, 2), "max": round(max(values), 2),
            "min": round(min(values), 2)}
