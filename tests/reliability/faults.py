"""Fault injection on the test stack, the checks every fault test ends with, and the results file.

Each reliability test records what it tried, how many times, and what was lost into
test-artifacts/reliability/<name>.json (written before its assertions, so a failure shows in the
table too); `python tests/reliability/faults.py report` (make reliability) turns those files into
docs/reliability.md.

"Lost" is measured against the sources of truth, never against what a service says about itself:
Slurm's Restarts counter (scontrol show job), the Postgres ledger, and the ADVICE stream.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # slurmjobs: sbatch, job_fields, stack (no __init__.py)

from slurmjobs import job_fields, ledger, sbatch, stack  # noqa: E402

RESULTS_ROOT = REPO / "test-artifacts" / "reliability"
SLURM = os.environ.get("RELAUNCH_TEST_SLURM") or "22.05"
"""The Slurm release the results are from (tests/conftest.py); each release has a folder of its own."""
ONE_RELEASE = "22.05"
"""Where the reliability tests that do not depend on Slurm (API fuzz, TLS, NATS permissions) run, once."""
RESULTS = Path(os.environ.get("RELAUNCH_RELIABILITY_RESULTS") or RESULTS_ROOT / SLURM)
DOC = REPO / "docs" / "reliability.md"
RELEASES = ("22.05", "24.11", "26.05")


# -- faults ---------------------------------------------------------------------------------------
def pid_of(env: dict, name: str) -> int:
    return int((Path(env["RELAUNCH_RUN_DIR"]) / "pids" / f"{name}.pid").read_text().strip())


def sigkill(env: dict, name: str) -> int:
    """SIGKILL a process of the stack by its pid file (a crash: no clean-up) and wait until it is gone."""
    pid = pid_of(env, name)
    os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            break
        if any(line.startswith("State:") and "Z" in line for line in status.splitlines()):
            break
        time.sleep(0.05)
    return pid


def stop_server(env: dict, server: str) -> None:
    """Stop one infrastructure server cleanly (scripts/stack.sh stop: nats|redis|postgres|slurmctld|slurmdbd)."""
    stack(env, "stop", server)


def restore(env: dict) -> None:
    """Start whatever part of the stack is not running (infrastructure, then services)."""
    stack(env, "infra-up")
    stack(env, "services-up")


# -- jobs ------------------------------------------------------------------------------------------
def submit(env: dict, **job_env: str) -> str:
    """A flaky-train job whose first attempt segfaults and whose second completes."""
    job_env.setdefault("STEP_SECONDS", "0.3")
    return sbatch(env, "flaky-train.sh", "relaunch:max_attempts=2", **job_env)


async def submit_and_wait_for_step(env: dict, step: str, timeout: float = 60, **job_env: str) -> str:
    """Submit a job and return once the actuator's audit trail shows `step` for it (mid-recovery)."""
    from relaunch.client.events import EventStream
    from relaunch.common.schemas import AuditEntry

    async with EventStream(env["RELAUNCH_NATS_URL"], f"relaunch.event.audit.{env['RELAUNCH_CLUSTER']}.>") as events:
        job = submit(env, **job_env)
        end = time.monotonic() + timeout
        while True:
            _, msg = await events.next(timeout=max(end - time.monotonic(), 0.1))
            if isinstance(msg, AuditEntry) and msg.job_id == job and msg.action == step:
                return job


# -- checks against the sources of truth --------------------------------------------------------
@dataclass
class JobOutcome:
    job_id: str
    state: str
    restarts: int
    anomalies: int
    advice: int
    converged: int
    advice_in_stream: bool
    explained: dict[str, list[str]] = field(default_factory=dict)
    """Only for a job that did not recover exactly once or lost something: its audit trail and its attempts
    in accounting (explain)."""

    @property
    def recovered(self) -> bool:
        return self.state == "COMPLETED" and self.converged >= 1

    @property
    def exactly_once(self) -> bool:
        return self.restarts == 1 and self.advice == 1

    @property
    def clean(self) -> bool:
        """Recovered exactly once, with its anomaly in the ledger and its Advice in the stream."""
        return self.recovered and self.exactly_once and self.anomalies > 0 and self.advice_in_stream


async def ledger_counts(dsn: str, cluster: str, job_ids: list[str]) -> dict[str, dict[str, int]]:
    """Per job: anomalies of attempt 0, Advice rows, converged Advice rows (straight from Postgres)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        out = {job: {"anomalies": 0, "advice": 0, "converged": 0} for job in job_ids}
        for row in await conn.fetch("SELECT job_id, count(*) AS n FROM anomalies WHERE cluster=$1 AND attempt=0 "
                                    "AND job_id = ANY($2::text[]) GROUP BY job_id", cluster, job_ids):
            out[row["job_id"]]["anomalies"] = row["n"]
        for row in await conn.fetch("SELECT job_id, count(*) AS n, count(*) FILTER (WHERE status='CONVERGED') AS c "
                                    "FROM advice WHERE cluster=$1 AND job_id = ANY($2::text[]) GROUP BY job_id",
                                    cluster, job_ids):
            out[row["job_id"]].update(advice=row["n"], converged=row["c"])
        return out
    finally:
        await conn.close()


async def awaiting_ack(nats_url: str, stream: str, durable: str) -> int:
    """Messages a durable consumer has delivered and not yet had acked (those being retried included)."""
    import nats

    from relaunch.common.natsauth import ADMIN, read_password

    creds = Path(os.environ["RELAUNCH_RUN_DIR"]) / "creds" / f"{ADMIN}.pass"
    options = {"user": ADMIN, "password": read_password(creds)} if creds.exists() else {}
    nc = await nats.connect(nats_url, connect_timeout=3, allow_reconnect=False, **options)
    try:
        return (await nc.jetstream().consumer_info(stream, durable)).num_ack_pending
    finally:
        await nc.close()


async def advice_in_stream(nats_url: str, cluster: str, job_ids: list[str]) -> dict[str, bool]:
    """Whether the ADVICE stream holds an Advice for each job (the actuator's input, not the ledger's copy)."""
    import nats
    import nats.js.errors

    from relaunch.common import subjects

    from relaunch.common.natsauth import ADMIN, read_password

    # The test reads the stream as the stack's admin user: no service user may read ADVICE but the actuator.
    creds = Path(os.environ["RELAUNCH_RUN_DIR"]) / "creds" / f"{ADMIN}.pass"
    options = {"user": ADMIN, "password": read_password(creds)} if creds.exists() else {}
    nc = await nats.connect(nats_url, connect_timeout=3, allow_reconnect=False, **options)
    try:
        js = nc.jetstream()
        found = {}
        for job in job_ids:
            try:
                await js.get_last_msg(subjects.ADVICE.name, subjects.advice(cluster, job))
                found[job] = True
            except nats.js.errors.NotFoundError:
                found[job] = False
        return found
    finally:
        await nc.close()


async def outcomes(env: dict, job_ids: list[str]) -> list[JobOutcome]:
    counts = await ledger_counts(env["RELAUNCH_DATABASE_URL"], env["RELAUNCH_CLUSTER"], job_ids)
    streamed = await advice_in_stream(env["RELAUNCH_NATS_URL"], env["RELAUNCH_CLUSTER"], job_ids)
    result = []
    for job in job_ids:
        fields = job_fields(job)
        c = counts[job]
        result.append(JobOutcome(job, fields["JobState"], int(fields["Restarts"]), c["anomalies"], c["advice"],
                                 c["converged"], streamed[job]))
    return result


def attempts_in_accounting(job_id: str) -> list[str]:
    """Every attempt of the job as accounting has it (sacct --duplicates): state, exit code, times, nodes."""
    out = subprocess.run(["sacct", "-X", "-D", "-n", "-P", "-j", job_id,
                          "--format=JobIDRaw,State,ExitCode,Submit,Start,End,NodeList"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip().splitlines() if out.returncode == 0 else [f"sacct failed: {out.stderr.strip()}"]


def explain(seen: list[JobOutcome]) -> None:
    """Fill `explained` of each job that is not clean (its audit trail, from `relaunch jobs show`, and its
    attempts in accounting), so that a failure says which service restarted it again, or whether Slurm did."""
    for o in seen:
        if o.clean:
            continue
        try:
            trail = [f"{a['at'][11:23]} {a['service']} {a['action']}: {a['detail'][:200]}"
                     for a in ledger(o.job_id).get("audit", [])]
        except Exception as exc:  # noqa: BLE001  (an explanation must not hide the failure it explains)
            trail = [f"ledger unreadable: {exc!r}"]
        o.explained = {"audit": trail, "attempts": attempts_in_accounting(o.job_id)}


async def wait_converged(env: dict, job_ids: list[str], timeout: float) -> list[JobOutcome]:
    """Poll until every job completed with a converged Advice (or the timeout); returns the last view."""
    import asyncio

    import nats.errors

    end = time.monotonic() + timeout
    pending = list(job_ids)
    while pending and time.monotonic() < end:  # cheap first: Slurm's view
        try:
            pending = [j for j in pending if job_fields(j)["JobState"] != "COMPLETED"]
        except subprocess.CalledProcessError:  # slurmctld still coming back
            pass
        await asyncio.sleep(0.5)
    while True:
        try:
            seen = await outcomes(env, job_ids)
        except (OSError, ConnectionError, nats.errors.Error, subprocess.CalledProcessError) as exc:  # coming back
            if time.monotonic() > end:
                raise AssertionError(f"stack not reachable: {exc}") from exc
            await asyncio.sleep(1)
            continue
        if all(o.recovered for o in seen) or time.monotonic() > end:
            explain(seen)
            return seen
        await asyncio.sleep(1)


# -- results ----------------------------------------------------------------------------------------
@dataclass
class Result:
    """One row of docs/reliability.md."""

    name: str
    fault: str
    trials: int = 0
    """How many times the fault was injected."""
    recoveries: int = 0
    """Recoveries (jobs) that went through it and completed with a converged Advice."""
    jobs: int = 0
    exactly_once: int = 0
    """Jobs restarted exactly once (Slurm Restarts == 1 and one Advice)."""
    lost_advice: int = 0
    """Jobs with an anomaly but no Advice in the ledger or in the ADVICE stream."""
    lost_anomalies: int = 0
    """Jobs that failed but have no anomaly in the ledger."""
    seconds: float = 0.0
    seed: int | None = None
    notes: list[str] = field(default_factory=list)
    jobs_detail: list[dict] = field(default_factory=list)
    at: str = ""
    slurm: str = SLURM

    def add_jobs(self, seen: list[JobOutcome]) -> None:
        self.jobs += len(seen)
        self.recoveries += sum(o.recovered for o in seen)
        self.exactly_once += sum(o.exactly_once for o in seen)
        self.lost_anomalies += sum(o.anomalies == 0 for o in seen)
        self.lost_advice += sum(o.anomalies > 0 and (o.advice == 0 or not o.advice_in_stream) for o in seen)
        self.jobs_detail += [{**asdict(o), "recovered": o.recovered, "exactly_once": o.exactly_once, "clean": o.clean}
                             for o in seen]

    @property
    def clean(self) -> bool:
        return (self.jobs > 0 and self.recoveries == self.jobs == self.exactly_once
                and self.lost_advice == 0 and self.lost_anomalies == 0)

    def write(self) -> Path:
        RESULTS.mkdir(parents=True, exist_ok=True)
        self.at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        path = RESULTS / f"{self.name}.json"
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    def assert_clean(self) -> None:
        bad = [d for d in self.jobs_detail if not d["clean"]]
        why = "".join(f"\n  job {d['job_id']} {part}:\n    " + "\n    ".join(lines)
                      for d in bad for part, lines in d["explained"].items())
        bad = [{k: v for k, v in d.items() if k not in ("explained", "clean")} for d in bad]
        assert self.clean, f"{self.fault}: {self.recoveries}/{self.jobs} recovered, {self.exactly_once} exactly " \
                           f"once, lost advice {self.lost_advice}, lost anomalies {self.lost_anomalies}: {bad}{why}"


def _cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    lost = r["lost_advice"] + r["lost_anomalies"]
    ok = r["recoveries"] == r["jobs"] == r["exactly_once"] and lost == 0 and r["jobs"] > 0
    text = f"{r['recoveries']}/{r['jobs']} recovered, {r['exactly_once']} once, {lost} lost, {r['seconds']:.0f} s"
    return text if ok else f"**{text}**"


def render(results: list[dict]) -> str:
    """One row per fault, one column per Slurm release."""
    releases = [v for v in RELEASES if any(r.get("slurm", "22.05") == v for r in results)]
    by_fault: dict[str, dict[str, dict]] = {}
    for r in results:
        by_fault.setdefault(r["name"], {})[r.get("slurm", "22.05")] = r
    lines = [
        "# Reliability: what was tried and what was lost",
        "",
        "Generated by `make reliability` (or `make test`) from the results the tests in `tests/reliability`",
        "write to `test-artifacts/reliability/<Slurm release>/*.json`; do not edit by hand. Every fault runs",
        "against the real stack (NATS JetStream, Postgres, Redis, a 4-node Slurm cluster of that release and",
        "every relaunch service). A recovery counts only when Slurm says the job completed after exactly one",
        "restart (`Restarts=1` in `scontrol show job`), the ledger holds its anomaly and exactly one converged",
        "Advice, and the ADVICE stream holds that Advice. A cell reads: recoveries/jobs, restarted exactly once,",
        "lost (Advice or anomalies), time; a cell in bold is not clean. For a job that is not clean, the",
        "test's failure and its results file (`explained`) give the job's audit trail (`relaunch jobs show`)",
        "and its attempts in Slurm's accounting (`sacct -D`): who restarted it again, or whether Slurm did.",
        "",
        "| fault | trials | " + " | ".join(f"Slurm {v}" for v in releases) + " |",
        "|---|---:|" + "---|" * len(releases),
    ]
    for name in sorted(by_fault):
        row = by_fault[name]
        any_r = next(iter(row.values()))
        seed = f" (seed {any_r['seed']})" if any_r.get("seed") is not None else ""
        trials = "/".join(str(row[v]["trials"]) if v in row else "-" for v in releases)
        lines.append(f"| {any_r['fault']}{seed} | {trials} | " + " | ".join(_cell(row.get(v)) for v in releases) + " |")
    lines.append("")
    for v in releases:
        mine = [r for r in results if r.get("slurm", "22.05") == v]
        total = sum(r["jobs"] for r in mine)
        lost = sum(r["lost_advice"] + r["lost_anomalies"] for r in mine)
        once = sum(r["exactly_once"] for r in mine)
        lines.append(f"Slurm {v}: {total} recoveries under faults, {once} restarted exactly once, {lost} lost.")
    notes = [(r["fault"], r.get("slurm", "22.05"), n) for r in sorted(results, key=lambda r: (r["name"], r.get("slurm", "")))
             for n in r.get("notes", [])]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {fault} (Slurm {v}): {note}" for fault, v, note in notes]
    runs = sorted(r.get("at", "") for r in results)
    if runs:
        lines += ["", f"Last run: {runs[-1]}."]
    return "\n".join(lines) + "\n"


HOSTS = "hosts"
"""The folder of the hosts tier's results (tests/hosts: faults between hosts, run once)."""


def record_hosts(name: str, fault: str, **row) -> Path:
    """One row of the hosts table: trials, recoveries, exactly_once, lost, and time stats
    (detected_s, running_again_s: {median, p95, max}) where they apply; notes."""
    folder = RESULTS_ROOT / HOSTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"name": name, "fault": fault, "at": dt.datetime.now(dt.UTC).isoformat(
        timespec="seconds"), **row}, indent=2) + "\n")
    return path


def _times(stats: dict | None) -> str:
    if not stats:
        return "-"
    return f"{stats['median']:.1f} / {stats['p95']:.1f} / {stats['max']:.1f} s"


def render_hosts(rows: list[dict]) -> str:
    if not rows:
        return ""
    lines = ["", "## Faults between hosts", "",
             "From `tests/hosts` (once per `make test`, Slurm 22.05), on the hosts topology: each Slurm node, its",
             "gpu-probe and its job processes in a network namespace of their own (`scripts/stack.sh cut|heal|freeze|",
             "thaw NODE...`: several nodes one right after another, as a whole-rack cut), with Slurm's default",
             "SlurmdTimeout of 300 s, and NATS as a 3-server cluster, each server in a",
             "namespace of its own, every stream and bucket with 3 replicas (`RELAUNCH_NATS_SERVERS=3`, `stack.sh",
             "nats-kill|nats-start N`). Times are median / p95 / max from the fault.",
             "",
             "| fault | trials | recovered | exactly once | lost | detected | running again |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in sorted(rows, key=lambda r: r["name"]):
        bad = r.get("lost", 0) or r.get("recoveries", 0) != r.get("trials") or r.get("exactly_once", 0) != r.get("trials")
        cell = (lambda t: f"**{t}**") if bad else (lambda t: t)
        lines.append(f"| {r['fault']} | {r['trials']} | {cell(r.get('recoveries', 0))} | {r.get('exactly_once', 0)} | "
                     f"{r.get('lost', 0)} | {_times(r.get('detected_s'))} | {_times(r.get('running_again_s'))} |")
    notes = [(r["fault"], n) for r in sorted(rows, key=lambda r: r["name"]) for n in r.get("notes", [])]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {fault}: {note}" for fault, note in notes]
    return "\n".join(lines) + "\n"


def render_fuzz(fuzz: dict | None) -> str:
    if not fuzz:
        return ""
    statuses: dict[str, int] = {}
    for counts in fuzz["by_operation"].values():
        for status, n in counts.items():
            statuses[status] = statuses.get(status, 0) + n
    shown = ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
    return "\n".join(["", "## The API under a fuzzer", "",
                      f"`tests/reliability/test_api_fuzz.py` ({fuzz['tool']}, from the API's own OpenAPI, without a "
                      f"token and with the operator's): {fuzz['requests']} requests to {fuzz['operations']} "
                      f"operations, {fuzz['server_errors']} server errors; responses by status: {shown}. Every "
                      "error was JSON with a `detail`; no request without the token changed state.", ""])


def report() -> int:
    hosts = [json.loads(f.read_text()) for f in sorted((RESULTS_ROOT / HOSTS).glob("*.json"))]
    files = sorted(f for f in RESULTS_ROOT.glob("*/*.json") if f.parent.name != HOSTS)
    if not files:
        print(f"no results in {RESULTS_ROOT}/<release>/: run make reliability", file=sys.stderr)
        return 1
    results = []
    for f in files:
        data = json.loads(f.read_text())
        if {"fault", "trials", "jobs"} <= set(data):
            data.setdefault("slurm", f.parent.name)
            results.append(data)
    fuzz = RESULTS_ROOT / "api-fuzz.json"
    DOC.write_text(render(results) + render_hosts(hosts) + render_fuzz(json.loads(fuzz.read_text()) if fuzz.exists()
                                                                       else None))
    print(f"wrote {DOC} from {len(results)} result files")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["report"]:
        raise SystemExit("usage: faults.py report")
    raise SystemExit(report())
