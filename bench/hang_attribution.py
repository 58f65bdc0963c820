"""Hang attribution on real stuck-rank runs (issue 37's target): N torchrun DDP trainings on gloo on the
test stack's Slurm cluster, each with one rank stopped in a native call (a C sleep through ctypes,
tests/frameworks/scripts/faults.py FAULT=native), every relaunch service running. Per run: was the stuck
rank named, and its node (against where the fault really struck: faults.py writes it, FAULT_MARK), how
many seconds after the hang's declaration the evidence was taken, and what relaunch did. The summary
holds the target: the suspect rank and node named within 20 s of the declaration in >= 9 of 10 runs.

    python bench/hang_attribution.py [--runs 10] [--parallel 2] [--shapes 2x1,2x2] [--json PATH]
    make bench-hang

The runs cycle through the shapes (nodes x ranks per node: 2x1 is one rank on each of 2 nodes, 2x2 two
on each), and each shape's runs through its ranks (its k-th run strikes rank k mod world size), so every
rank's place is blamed in turn. A run ends once relaunch's decision on the hang has an outcome; the job is then cancelled (its
restart is the frameworks tier's matter). The stack is its own (--run-dir, --port-base), started fresh
and stopped at the end, with the test stack's settings (tests/conftest.py: hang floor 10 s); the jobs
carry the frameworks tier's hang_timeout=30. Exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "frameworks"), str(REPO / "tests" / "e2e")]
from slurmjobs import job_fields, ledger  # noqa: E402 - the e2e tier's Slurm and ledger readers
from test_frameworks import Case, _submit  # noqa: E402 - the frameworks tier's submission, as its cases

TARGET_S = 20.0
COMMENT = "relaunch:hang_timeout=30,straggler_threshold=50,max_attempts=2"  # the frameworks tier's
RUN_TIMEOUT_S = 300.0
"""Submission to a decided hang: torch's start on a busy 2-core machine, 8 steps, the 30 s hang timeout."""


def stack_env(run: Path, port_base: str) -> dict:
    """The test stack's settings (tests/conftest.py STACK_ENV) on this bench's own folder and ports."""
    return {**os.environ, "RELAUNCH_RUN_DIR": str(run), "RELAUNCH_PORT_BASE": port_base,
            "RELAUNCH_CLUSTER": "benchhang", "RELAUNCH_SLURM": "22.05", "RELAUNCH_SLURM_API": "cli",
            "RELAUNCH_WATCHDOG_BOUND_S": "15", "RELAUNCH_WATCHDOG_INTERVAL_S": "1",
            "RELAUNCH_DETECTOR_HANG_FLOOR_S": "10", "RELAUNCH_SLURM_SCHEDULER_PARAMETERS": "batch_sched_delay=1"}


def stack(env: dict, *args: str) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "stack.sh"), *args], check=True, env=env, timeout=300,
                   stdout=subprocess.DEVNULL)


def read_env(run: Path) -> dict:
    env = {}
    for line in (run / "env").read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
    env.pop("PATH", None)
    return env


def _t(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def submit(i: int, shapes: list[str], python: str, marks: Path) -> dict:
    shape = shapes[i % len(shapes)]
    nodes, per_node = (int(x) for x in shape.split("x"))
    rank = (i // len(shapes)) % (nodes * per_node)  # each shape's own runs go through its ranks
    case = Case(f"hang-{i} {shape}", "ddp2", "30", COMMENT,
                env={"FAULT": "native", "FAULT_STEP": "8", "FAULT_RANK": str(rank), "FW_NPROC": str(per_node),
                     "FAULT_MARK": str(marks)},
                sbatch=("-N", str(nodes), "--ntasks-per-node", "1", "-c", str(per_node)))
    job = _submit(case, os.environ, python)
    print(f"[bench-hang] run {i}: job {job}, {shape}, rank {rank} stuck", file=sys.stderr, flush=True)
    return {"run": i, "job": job, "shape": shape, "stuck_rank": rank, "submitted": time.monotonic()}


def settled(run: dict, marks: Path) -> dict | None:
    """The run's result once relaunch decided on its hang (or gave up waiting); None while it is under way."""
    record = ledger(run["job"])
    evidence = record.get("hang_evidence") or []
    anomalies = {a["anomaly_id"]: a for a in record.get("anomalies") or []}
    first = evidence[0] if evidence else None
    acted = next((a for a in record.get("advice") or []
                  if first and f"anomaly:{first['anomaly_id']}" in (a.get("evidence_refs") or [])), None)
    timed_out = time.monotonic() - run["submitted"] > RUN_TIMEOUT_S
    if not timed_out and (first is None or acted is None or acted["status"] == "PENDING"):
        return None
    truth = next(iter(sorted(marks.glob(f"fault-{run['job']}-0-*.json"))), None)
    where = json.loads(truth.read_text()) if truth else {}
    declared = anomalies.get(first["anomaly_id"], {}).get("detected_at") if first else None
    after = round((_t(first["collected_at"]) - _t(declared)).total_seconds(), 1) if first and declared else None
    rank_ok = bool(first) and first["suspects"] == [run["stuck_rank"]] and where.get("rank") == run["stuck_rank"]
    node_ok = bool(first) and bool(where) and first["suspect_nodes"] == [where.get("node")]
    action = "-"
    if acted:
        action = acted["operation"] + (f" without {','.join(acted['exclude_nodes'])}" if acted["exclude_nodes"] else "")
    return {**{k: run[k] for k in ("run", "job", "shape", "stuck_rank")}, "stuck_node": where.get("node"),
            "status": first["status"] if first else "none", "blame": first["blame"] if first else None,
            "blamed_ranks": first["suspects"] if first else [], "blamed_nodes": first["suspect_nodes"] if first else [],
            "rank_right": rank_ok, "node_right": node_ok, "s_after_declaration": after,
            "collection_s": first["elapsed_s"] if first else None, "action": action,
            "named_within_target": rank_ok and node_ok and after is not None and after <= TARGET_S,
            "reason": (first or {}).get("reason") or (first or {}).get("detail") or
                      ("timed out waiting for evidence and a decision" if timed_out else "")}


def summary(results: list[dict]) -> dict:
    named = sum(r["named_within_target"] for r in results)
    afters = sorted(r["s_after_declaration"] for r in results if r["s_after_declaration"] is not None)
    need = -(-9 * len(results) // 10)  # 9 of 10, scaled
    return {"runs": len(results), "rank_right": sum(r["rank_right"] for r in results),
            "node_right": sum(r["node_right"] for r in results), "named_within_20_s": named,
            "target": f">= {need} of {len(results)} named within {TARGET_S:.0f} s", "met": named >= need,
            "s_after_declaration": {"median": statistics.median(afters) if afters else None,
                                    "max": afters[-1] if afters else None}}


def table(results: list[dict]) -> str:
    rows = ["| run | shape | stuck | blamed | right | s after the hang | action |", "|---|---|---|---|---|---|---|"]
    for r in results:
        blamed = ",".join(f"rank {x}" for x in r["blamed_ranks"]) or "-"
        rows.append(f"| {r['run']} | {r['shape']} | rank {r['stuck_rank']} on {r['stuck_node']} | {blamed} on "
                    f"{','.join(r['blamed_nodes']) or '-'} | {'yes' if r['rank_right'] and r['node_right'] else 'no'} | "
                    f"{r['s_after_declaration']} | {r['action']} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=2, help="runs at once (the cluster has 4 nodes x 2 CPUs)")
    ap.add_argument("--shapes", default="2x1,2x2", help="nodes x ranks per node, cycled through")
    ap.add_argument("--run-dir", default=str(REPO / ".run" / "bench-hang"))
    ap.add_argument("--port-base", default="18000")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "hang-attribution.json"))
    args = ap.parse_args()
    run_dir = Path(args.run_dir).resolve()
    env = stack_env(run_dir, args.port_base)
    python = subprocess.run(["bash", str(REPO / "scripts" / "frameworks-venv.sh")], check=True, capture_output=True,
                            text=True, timeout=1800).stdout.strip().splitlines()[-1]
    stack(env, "down")
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.monotonic()
    stack(env, "infra-up")
    results: list[dict] = []
    try:
        stack(env, "services-up")
        os.environ.update({**read_env(run_dir), "RELAUNCH_RUN_DIR": str(run_dir)})
        marks = run_dir / "fault-marks"
        marks.mkdir(exist_ok=True)
        shapes = args.shapes.split(",")
        pending = list(range(args.runs))
        running: list[dict] = []
        while pending or running:
            while pending and len(running) < args.parallel:
                i = pending.pop(0)
                running.append(submit(i, shapes, python, marks))
            time.sleep(3)
            for run in list(running):
                if (found := settled(run, marks)) is not None:
                    subprocess.run(["scancel", run["job"]], check=False)
                    running.remove(run)
                    results.append(found)
                    print(f"[bench-hang] run {found['run']} ({found['shape']}): rank {found['stuck_rank']} on "
                          f"{found['stuck_node']} stuck; blamed {found['blamed_ranks']} on {found['blamed_nodes']} "
                          f"{found['s_after_declaration']} s after the declaration; {found['action']}",
                          file=sys.stderr, flush=True)
                    if not found["named_within_target"]:
                        print(f"  state {job_fields(run['job']).get('JobState')}: {found['reason']}",
                              file=sys.stderr, flush=True)
    finally:
        stack(env, "down")
    results.sort(key=lambda r: r["run"])
    out = {"bench": "hang-attribution", "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "fault": "one rank stopped in a native call (ctypes sleep) at step 8 of a torchrun DDP training on gloo",
           "comment": COMMENT, "parallel": args.parallel, "seconds": round(time.monotonic() - started, 1),
           "summary": summary(results), "runs": results}
    text = json.dumps(out, indent=2)
    print(table(results), file=sys.stderr)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if out["summary"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
