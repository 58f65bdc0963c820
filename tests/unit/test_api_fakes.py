"""In-memory stand-ins for the API's backends, and one sample job timeline (no tests here).

The fakes keep the adapters' method signatures, so the routes run unchanged; the sample is shaped
the way relaunch.api.adapters.ledger_read returns ledger rows (the integration tests check that
shape against real Postgres).
"""

from __future__ import annotations

import datetime as dt
import json
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from relaunch.api.adapters.events import EventsUnavailable, StreamClosed, StreamedEvent
from relaunch.api.app import create_app
from relaunch.api.backends import Backends
from relaunch.api.domain import evidence, nodes
from relaunch.api.settings import ApiSettings

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
HOSTILE_NAME = "<img src=x onerror=alert(1)>train"
"""A job name that would run script if the dashboard ever put ledger text into HTML."""


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat()


def sample_job() -> dict:
    """Job 101 on cluster 'local': attempt 0 died of an XID 79 on node1; relaunch restarted it without node1."""
    anomaly = {
        "anomaly_id": "local.101.0.crash", "cluster": "local", "job_id": "101", "attempt": 0, "kind": "crash",
        "source": "log", "signature_id": "xid-79", "category": "gpu_fell_off_bus", "fault_domain": "hardware",
        "action": "restart_excluding", "summary": "GPU fell off the bus (XID 79) on node1", "nodes": ["node1"],
        "evidence": [{"path": "/jobs/train-101.out", "offset": 5120,
                      "text": "node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."}],
        "detected_at": at(60), "recorded_at": at(60.1),
    }
    advice = {
        "cluster": "local", "job_id": "101", "generation": 1, "attempt": 0, "operation": "restart",
        "exclude_nodes": ["node1"], "reason": "gpu_fell_off_bus: restarting without node1 (attempt 2 of at most 3)",
        "evidence_refs": ["anomaly:local.101.0.crash", "node:node1:0.9:XID 79 (hardware) on an allocated node"],
        "policy": {"max_attempts": 3}, "status": "CONVERGED", "status_reason": "successor is pending, unheld",
        "issued_at": at(60.2), "expires_at": at(1860.2), "updated_at": at(62),
    }
    advice["evidence"] = evidence.resolve(advice["evidence_refs"], {anomaly["anomaly_id"]: anomaly})
    advice["reconcile"] = [
        {"generation": 1, "status": "PENDING", "reason": "requeued in held state", "step": "requeuehold",
         "detail": "", "at": at(60.5)},
        {"generation": 1, "status": "PENDING", "reason": "excluded node1", "step": "exclude", "detail": "",
         "at": at(61)},
        {"generation": 1, "status": "CONVERGED", "reason": "desired state observed", "step": "",
         "detail": "restart 1 pending, unheld", "at": at(62)},
    ]
    job = {"cluster": "local", "job_id": "101", "name": HOSTILE_NAME, "comment": "relaunch:max_attempts=3",
           "partition": "gpu", "options": {"max_attempts": 3}, "option_errors": [], "mode": "act",
           "state": "RUNNING", "reason": "", "restarts": 1, "verdict": "watching",
           "verdict_reason": "advice generation 1 converged: desired state observed", "first_seen": at(0),
           "updated_at": at(70), "mode_override": None}
    return {
        "job": job,
        "attempts": [
            {"index": 0, "state": "FAILED", "nodes": ["node1", "node2"], "exit_code": 1, "first_seen": at(1),
             "updated_at": at(60)},
            {"index": 1, "state": "RUNNING", "nodes": ["node2", "node3"], "exit_code": None, "first_seen": at(64),
             "updated_at": at(70)},
        ],
        "anomalies": [anomaly],
        "advice": [advice],
        "audit": [{"service": "decider", "action": "restart", "detail": json.dumps({"attempt": 0, "generation": 1}),
                   "idempotency_key": "decider.local.101.0.crash", "at": at(60.2)}],
        "overrides": [],
    }



VICTIM_FRAMES = ["pthread_cond_wait (/usr/lib/x86_64-linux-gnu/libc.so.6)",
                 "c10d::Work::wait (/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so)",
                 "all_reduce (/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252)",
                 "train (/work/train.py:23)", "<module> (/work/train.py:28)"]
SUSPECT_FRAMES = ["clock_nanosleep (/usr/lib/x86_64-linux-gnu/libc.so.6)", "sleep (/usr/lib/x86_64-linux-gnu/libc.so.6)",
                  "0x7f1874ad6f7a (/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2)", "train (/work/train.py:20)",
                  "<module> (/work/train.py:28)"]


def sample_hang_job() -> dict:
    """Job 103: hung in attempt 0 with rank 1 on node2 stuck in a native call; relaunch read every rank
    (HangEvidence, as relaunch.actuator.domain.hang_readings makes it) and restarted it without node2."""
    anomaly = {
        "anomaly_id": "local.103.0.hang", "cluster": "local", "job_id": "103", "attempt": 0, "kind": "hang",
        "source": "progress", "signature_id": "hang_no_progress", "category": "hang", "fault_domain": "unknown",
        "action": "restart", "summary": "no progress for 31 s since step 7", "nodes": [], "evidence": [],
        "detected_at": at(40), "recorded_at": at(40.1)}

    def rank(n, node, role, **more):
        return {"rank": n, "node": node, "pid": 4000 + n, "role": role, "where": "collective",
                "collective": None, "place": "train.py:23 (train)", "call": None, "state": "S", "cpu_ticks": 0,
                "frames": VICTIM_FRAMES, "dump_mode": "native", "error": "", **more}
    reason = ("rank 1 on node2 is stuck in a native call (clock_nanosleep in libc.so.6 through ctypes) from "
              "train.py:20 (train) while ranks 0, 2, 3 wait in all_reduce")
    hang = {"schema": "relaunch.hang_evidence/v1", "anomaly_id": anomaly["anomaly_id"], "cluster": "local",
            "job_id": "103", "attempt": 0, "status": "collected", "detail": "", "blame": "node",
            "victims": [0, 2, 3], "suspects": [1], "suspect_nodes": ["node2"], "place": None, "reason": reason,
            "ranks": [rank(0, "node1", "victim", collective="all_reduce"),
                      rank(1, "node2", "suspect", where="native", place="train.py:20 (train)",
                           call="clock_nanosleep in libc.so.6 through ctypes", frames=SUSPECT_FRAMES),
                      rank(2, "node3", "victim", collective="all_reduce"),
                      rank(3, "node4", "victim", collective="all_reduce")],
            "elapsed_s": 2.4, "collected_at": at(42.6), "recorded_at": at(42.7)}
    advice = {
        "cluster": "local", "job_id": "103", "generation": 1, "attempt": 0, "operation": "restart",
        "exclude_nodes": ["node2"], "reason": "hang: restarting without node2 (attempt 2 of at most 2)",
        "evidence_refs": [f"anomaly:{anomaly['anomaly_id']}", f"node:node2:0.9:{reason}"],
        "policy": {"max_attempts": 2}, "status": "CONVERGED", "status_reason": "successor is pending, unheld",
        "issued_at": at(43), "expires_at": at(1843), "updated_at": at(45), "reconcile": []}
    advice["evidence"] = evidence.resolve(advice["evidence_refs"], {anomaly["anomaly_id"]: anomaly})
    job = {"cluster": "local", "job_id": "103", "name": "ddp4", "comment": "relaunch:max_attempts=2",
           "partition": "gpu", "options": {"max_attempts": 2}, "option_errors": [], "mode": "act",
           "state": "RUNNING", "reason": "", "restarts": 1, "verdict": "watching", "verdict_reason": "",
           "first_seen": at(0), "updated_at": at(50), "mode_override": None}
    return {"job": job, "attempts": [
        {"index": 0, "state": "REQUEUED", "nodes": ["node1", "node2", "node3", "node4"], "exit_code": None,
         "first_seen": at(1), "updated_at": at(44)}],
        "anomalies": [anomaly], "advice": [advice], "audit": [], "overrides": [], "hang_evidence": [hang]}


def sample_nodes() -> list[dict]:
    health = [{"cluster": "local", "node": "node1", "verdict": "failed", "reasons": ["XID 79 on GPU 3"],
               "xids": [], "at": at(58)},
              {"cluster": "local", "node": "node2", "verdict": "healthy", "reasons": [], "xids": [], "at": at(58)}]
    events = [{"cluster": "local", "node": "node1", "verdict": "failed", "reasons": ["XID 79 on GPU 3"],
               "xids": [], "at": at(58), "total": 2},
              {"cluster": "local", "node": "node1", "verdict": "degraded", "reasons": ["ECC errors rising"],
               "xids": [], "at": at(30), "total": 2}]
    exclusions = [{"cluster": "local", "node": "node1", "job_id": "101", "name": HOSTILE_NAME, "generation": 1,
                   "attempt": 0, "status": "CONVERGED", "reason": "restarting without node1", "issued_at": at(60.2)}]
    return nodes.assemble(health, events, exclusions)


class FakeLedger:
    def __init__(self) -> None:
        detail = sample_job()
        second = {**detail["job"], "job_id": "102", "name": "eval", "state": "COMPLETED", "verdict": "watching",
                  "verdict_reason": "", "restarts": 0, "updated_at": at(20)}
        self.details = {("local", "101"): detail, ("local", "102"): {
            "job": second, "attempts": [{"index": 0, "state": "COMPLETED", "nodes": ["node4"], "exit_code": 0,
                                         "first_seen": at(2), "updated_at": at(20)}],
            "anomalies": [], "advice": [], "audit": [], "overrides": []}}
        self.rows = [{**detail["job"], "attempt_count": 2}, {**second, "attempt_count": 1}]
        self.up = True
        self.fail_with: Exception | None = None
        self.calls: list[tuple[str, dict]] = []

    def _check(self, name: str, **kwargs) -> None:
        self.calls.append((name, kwargs))
        if self.fail_with is not None:
            raise self.fail_with

    async def ping(self) -> bool:
        return self.up

    async def jobs(self, cluster=None, states=None, verdicts=None, limit=50, offset=0):
        self._check("jobs", cluster=cluster, states=states, verdicts=verdicts, limit=limit, offset=offset)
        rows = [r for r in self.rows if (cluster is None or r["cluster"] == cluster)
                and (not states or r["state"] in states) and (not verdicts or r["verdict"] in verdicts)]
        return rows[offset:offset + limit], len(rows)

    async def job(self, cluster, job_id):
        self._check("job", cluster=cluster, job_id=job_id)
        return self.details.get((cluster, job_id))

    async def advice(self, cluster=None, active=None, limit=50, offset=0):
        self._check("advice", cluster=cluster, active=active, limit=limit, offset=offset)
        items = [{**a, "name": d["job"]["name"], "active": a["status"] == "PENDING"}
                 for d in self.details.values() for a in d["advice"]]
        items = [a for a in items if active is None or a["active"] == active]
        return items[offset:offset + limit], len(items)

    async def fleet(self, now, days=14, cluster=None):
        """The fleet view over the sample jobs (the real query is tests/integration/test_api_ledger.py)."""
        from relaunch.api.domain.fleet import fleet

        details = list(self.details.values())
        anomalies = [{**a, "cluster": d["job"]["cluster"], "job_id": d["job"]["job_id"]} for d in details
                     for a in d["anomalies"]]
        advice = [{**a, "cluster": d["job"]["cluster"], "job_id": d["job"]["job_id"]} for d in details
                  for a in d["advice"]]
        attempts = [{**a, "cluster": d["job"]["cluster"], "job_id": d["job"]["job_id"]} for d in details
                    for a in d["attempts"]]
        return fleet(anomalies, advice, attempts, [], now, days)

    async def nodes(self, cluster=None, history=20):
        self._check("nodes", cluster=cluster, history=history)
        return [n for n in sample_nodes() if cluster is None or n["cluster"] == cluster]


class FakeOverrides:
    def __init__(self, ledger: FakeLedger) -> None:
        self.ledger = ledger
        self.recorded: list[dict] = []
        self.cleared: list[dict] = []

    async def record(self, cluster, job_id, mode, reason, actor):
        if (cluster, job_id) not in self.ledger.details:
            return None
        row = {"id": len(self.recorded) + 1, "cluster": cluster, "job_id": job_id, "mode": mode, "reason": reason,
               "actor": actor, "at": at(100 + len(self.recorded))}
        self.recorded.append(row)
        detail = self.ledger.details[(cluster, job_id)]
        detail["overrides"].append({k: row[k] for k in ("id", "mode", "reason", "actor", "at")})
        detail["job"]["mode_override"] = mode
        return row

    async def clear_node(self, cluster, node, reason, actor):
        if not any(n["cluster"] == cluster and n["node"] == node for n in sample_nodes()):
            return None
        row = {"id": len(self.cleared) + 1, "cluster": cluster, "node": node, "reason": reason, "actor": actor,
               "at": at(200 + len(self.cleared)), "forgotten_exclusions": 1}
        self.cleared.append(row)
        return row


SAMPLE_EVENTS = [
    StreamedEvent(41, "relaunch.event.anomaly.local.101", json.dumps({
        "schema": "relaunch.anomaly/v1", "cluster": "local", "job_id": "101",
        "summary": "GPU fell off the bus (XID 79) on node1"}).encode(), T0 + dt.timedelta(seconds=60)),
    StreamedEvent(42, "relaunch.event.reconcile.local.101", json.dumps({
        "schema": "relaunch.reconcile_status/v1", "cluster": "local", "job_id": "101", "generation": 1,
        "status": "CONVERGED", "reason": "desired state observed\nsecond line"}).encode(),
        T0 + dt.timedelta(seconds=62)),
]


class FakeSubscription:
    def __init__(self, events: list, quiet_first: bool) -> None:
        self.pending = list(events)
        self.quiet_first = quiet_first
        self.closed = 0

    async def next(self, timeout: float):
        if self.quiet_first:  # one quiet period first, to see a heartbeat
            self.quiet_first = False
            return None
        if not self.pending:
            raise StreamClosed("fake stream ends")
        return self.pending.pop(0)

    async def close(self) -> None:
        self.closed += 1


class FakeEvents:
    def __init__(self) -> None:
        self.connected = True
        self.events = list(SAMPLE_EVENTS)
        self.quiet_first = False
        self.subscriptions: list[tuple[str, dict, FakeSubscription]] = []
        self.published: list[tuple[str, object, str]] = []

    async def subscribe(self, subject, *, since=None, after_seq=None):
        if not self.connected:
            raise EventsUnavailable("NATS at nats://fake is not connected: check that it runs (make up) and "
                                    "RELAUNCH_NATS_URL; the ledger endpoints work meanwhile")
        events = [e for e in self.events if after_seq is None or e.seq > after_seq]
        sub = FakeSubscription(events, self.quiet_first)
        self.subscriptions.append((subject, {"since": since, "after_seq": after_seq}, sub))
        return sub

    async def health(self) -> dict:
        if not self.connected:
            raise EventsUnavailable("NATS at nats://fake is not connected")
        return {"consumers": [{"service": "decider", "durable": "decider-anomalies", "stream": "EVENTS",
                               "pending": 0, "ack_pending": 0, "redelivered": 0}],
                "dlq_messages": 0, "leader": "actuator-fake"}

    async def publish(self, subject, model, msg_id) -> bool:
        if not self.connected:
            return False
        self.published.append((subject, model, msg_id))
        return True


class Fakes:
    def __init__(self) -> None:
        self.ledger = FakeLedger()
        self.overrides = FakeOverrides(self.ledger)
        self.events = FakeEvents()

    @asynccontextmanager
    async def connect(self):
        yield Backends(self.ledger, self.overrides, self.events)


def client(fakes: Fakes, tmp_path: Path | None = None, token: str | None = None, **settings) -> TestClient:
    """A TestClient over the real app with `fakes` as backends (use it in a `with` block: lifespan)."""
    if token is not None:
        assert tmp_path is not None
        path = tmp_path / "api-token"
        path.write_text(token + "\n")
        settings["token_file"] = str(path)
    app = create_app(ApiSettings(**settings), fakes.connect)
    return TestClient(app)
