"""Hang evidence end to end without Slurm: the collector's JSON (as rank_collector.py prints it, with real
py-spy dumps, tests/fixtures/pyspy) -> HangEvidence (the actuator's domain) -> what the decider makes of
it (suspect nodes left out, the same user-code place twice stops the job)."""

import datetime as dt
import json
from pathlib import Path

import pytest

from relaunch.actuator.domain.hang_readings import collector_argv, evidence, readings_from
from relaunch.common.hangs.triggers import wants_evidence
from relaunch.common.schemas import AnomalyDetected, HangEvidence
from relaunch.decider.domain.attribution import EXCLUDE_AT, Suspect
from relaunch.decider.domain.hang_verdicts import deadlock, with_hang_suspects

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
NOW = dt.datetime(2026, 12, 5, 1, 0, tzinfo=dt.UTC)
STAT = "{pid} (python) S 1 1 1 0 -1 4194560 100 0 0 0 {u} 5 0 0 20 0 9 0 100 1000 200"


def _anomaly(kind="hang", source="progress", category="hang") -> AnomalyDetected:
    return AnomalyDetected(anomaly_id="a1", cluster="local", job_id="42", attempt=0, kind=kind, source=source,
                           signature_id="hang_no_progress", category=category, fault_domain="unknown",
                           action="restart", summary="no progress", detected_at=NOW)


def _node_output(case: str, node: str, ranks: list[int]) -> str:
    out = []
    for rank in ranks:
        text = (FIXTURES / f"gloo3-{case}-rank{rank}.txt").read_text()
        pid = int(text.split()[1].rstrip(":"))
        out.append({"rank": rank, "local_rank": "0", "pid": pid, "interval_s": 0.5, "blocked_threads": 0,
                    "stat": [STAT.format(pid=pid, u=10), STAT.format(pid=pid, u=10)], "dump": text,
                    "dump_mode": "native", "error": ""})
    return json.dumps({"node": node, "ranks": out, "elapsed_s": 1.2})


def test_the_collectors_output_becomes_evidence_naming_the_node():
    outputs = [("node1", _node_output("native", "node1", [0]), ""), ("node2", _node_output("native", "node2", [1])
                                                                     , ""), ("node3", _node_output("native", "node3", [2]), "")]
    found = evidence(_anomaly(), outputs, 1.5, NOW)
    assert isinstance(found, HangEvidence) and found.status == "collected"
    assert (found.blame, found.suspects, found.suspect_nodes) == ("node", [1], ["node2"])
    assert [r.role for r in found.ranks] == ["victim", "suspect", "victim"]
    assert found.ranks[1].state == "S" and found.ranks[1].cpu_ticks == 0 and found.ranks[1].frames
    HangEvidence.model_validate_json(found.model_dump_json(by_alias=True))  # as on the wire


def test_a_node_that_did_not_answer_fails_closed():
    outputs = [("node1", _node_output("native", "node1", [0]), ""), ("node2", None, "no answer within 20 s")]
    found = evidence(_anomaly(), outputs, 20.0, NOW)
    assert found.blame == "none" and found.suspect_nodes == []
    assert "node2: no answer within 20 s" in found.detail
    nothing = evidence(_anomaly(), [("node1", "not json", ""), ("node2", None, "srun exited 1")], 1.0, NOW)
    assert nothing.status == "unavailable" and nothing.suspect_nodes == []


def test_readings_sorted_by_rank_from_every_node():
    readings, problems = readings_from([("n2", _node_output("sleep", "n2", [2, 1]), ""),
                                        ("n1", json.dumps({"node": "n1", "ranks": []}), "")])
    assert [r.rank for r in readings] == [1, 2] and problems == ["n1: no rank process of the job found"]


def test_the_srun_command_steps_into_the_job_beside_its_steps():
    argv = collector_argv("42", "node2", "python3", "print(1)", "/opt/py-spy")
    assert argv[:9] == ["srun", "--overlap", "--jobid=42", "-w", "node2", "-N1", "-n1", "--quiet", "--chdir=/"]
    assert argv[-6:] == ["python3", "-I", "-c", "print(1)", "42", "/opt/py-spy"]


def test_which_anomalies_are_read():
    assert wants_evidence(_anomaly())
    assert wants_evidence(_anomaly("crash", "log", "nccl_timeout_hang"))
    assert not wants_evidence(_anomaly(source="node", category="node_lost"))
    assert not wants_evidence(_anomaly("crash", "scheduler", "slurm_failed"))


def test_node_evidence_makes_an_excluded_suspect_of_the_jobs_own_node_only():
    body = {"status": "collected", "blame": "node", "suspect_nodes": ["node2", "elsewhere"], "reason": "rank 1 ..."}
    suspects = with_hang_suspects([Suspect("node2", 0.5, ("degraded",))], body, ["node1", "node2"])
    assert [(s.node, s.confidence >= EXCLUDE_AT) for s in suspects] == [("node2", True)]
    assert suspects[0].reasons[-1].startswith("hang evidence: rank 1")
    assert with_hang_suspects([], {**body, "blame": "none"}, ["node2"]) == []
    assert with_hang_suspects([], {**body, "blame": "user_code"}, ["node2"]) == []


def test_the_same_user_code_place_twice_is_a_deadlock():
    body = {"blame": "user_code", "place": "train.py:88 (train)", "reason": "rank 1 on node2 is in `time.sleep`"}
    assert deadlock(body, "train.py:88 (train)").startswith("hung in the program's own code at the same place")
    assert deadlock(body, None) is None and deadlock(body, "train.py:90 (train)") is None
    assert deadlock({**body, "blame": "node"}, "train.py:88 (train)") is None


def test_the_policy_cancels_a_hang_at_the_same_place_twice_and_restarts_one_blamed_on_a_node():
    from relaunch.decider.domain.policy import History, Policy, decide

    hang = _anomaly().model_copy(update={"attempt": 1})
    body = {"blame": "user_code", "place": "scripts/faults.py:45 (at_step)", "reason": "rank 1 on node2 is in ..."}
    d = decide(History(), hang, Policy(max_attempts=3), NOW, [], deadlock(body, "scripts/faults.py:45 (at_step)"))
    assert d.kind == "terminate" and d.rule == "hang_deadlock" and "same place in two attempts" in d.reason
    node = {"status": "collected", "blame": "node", "suspect_nodes": ["node2"], "reason": "rank 1 on node2 ..."}
    d = decide(History(), hang, Policy(max_attempts=3), NOW, tuple(with_hang_suspects([], node, ["node1", "node2"])))
    assert d.kind == "restart" and d.exclude_nodes == ("node2",)


class _Bus:
    def __init__(self):
        self.sent = []

    async def publish(self, subject, model, msg_id=None, traceparent=None):
        self.sent.append((subject, model, msg_id))
        return True


class _Slurm:
    def __init__(self, job):
        self.job = job

    async def show_job(self, job_id):
        return self.job


def _read(job, mode="act", enabled=True, anomaly=None):
    import asyncio

    from relaunch.actuator.hang_evidence import HangReader
    from relaunch.common.outcomes import Delivery

    bus = _Bus()
    reader = HangReader(bus, _Slurm(job), mode, enabled=enabled, python="python3", pyspy="py-spy", timeout_s=1)
    asyncio.run(reader.on_anomaly(anomaly or _anomaly(), Delivery("s", 1, 1)))
    return bus.sent


@pytest.mark.parametrize(("job", "mode", "enabled", "why"), [
    ({"comment": "relaunch"}, "observe", True, "observe mode"),
    ({"comment": "relaunch"}, "act", False, "collection is off"),
    (None, "act", True, "the job is gone"),
    ({"comment": "relaunch:max_attempts=banana"}, "act", True, "observe-only"),
    ({"comment": "nothing"}, "act", True, "does not opt in"),
])
def test_the_actuator_answers_every_hang_and_steps_into_no_job_it_may_not(job, mode, enabled, why):
    [(subject, found, msg_id)] = _read(job, mode, enabled)
    assert subject == "relaunch.event.hang_evidence.local.42" and msg_id == "hang_evidence.a1"
    assert found.status == "skipped" and why in found.detail and found.suspect_nodes == []


def test_the_actuator_ignores_anomalies_that_are_no_hang():
    assert _read({"comment": "relaunch"}, anomaly=_anomaly("crash", "scheduler", "slurm_failed")) == []


def test_the_collector_finds_the_ranks_of_its_job_on_its_node_only(tmp_path):
    """rank_collector.py run for real over real processes: torchrun's agent (SLURM_PROCID, no RANK), its
    rank (RANK=0) and that rank's data loader worker (the same environment), and a rank of another node
    that shares the host: only the rank of this node is read."""
    import os
    import subprocess
    import sys
    import time

    from relaunch.actuator.adapters.hang_collection import SCRIPT

    base = {**os.environ, "SLURM_JOB_ID": "777", "SLURMD_NODENAME": "nodeA"}
    base.pop("RANK", None)
    sleeper = "import subprocess, sys, time, os\n" \
              "if len(sys.argv) > 1: subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n" \
              "time.sleep(60)"
    def start(*argv, **env):
        return subprocess.Popen([sys.executable, "-c", sleeper, *argv], env={**base, **env}, start_new_session=True)

    procs = [start(SLURM_PROCID="0"), start("worker", RANK="0"), start(RANK="1", SLURMD_NODENAME="nodeB")]
    try:
        time.sleep(1.0)
        out = subprocess.run([sys.executable, "-c", SCRIPT, "777", str(tmp_path / "no-py-spy")], env=base,
                             capture_output=True, text=True, timeout=30)
        body = json.loads(out.stdout)
    finally:
        for p in procs:
            os.killpg(p.pid, 9)  # its data loader worker too
    assert [(r["rank"], r["pid"]) for r in body["ranks"]] == [(0, procs[1].pid)]
    rank = body["ranks"][0]
    assert len(rank["stat"]) == 2 and rank["stat"][1] and rank["dump"] is None and "py-spy" in rank["error"]


def test_jobs_show_prints_who_the_hang_evidence_blamed(monkeypatch):
    from typer.testing import CliRunner

    from relaunch.client import cli

    outputs = [(f"node{r + 1}", _node_output("native", f"node{r + 1}", [r]), "") for r in range(3)]
    found = json.loads(evidence(_anomaly(), outputs, 2.5, NOW).model_dump_json(by_alias=True))
    job = {"job": {"job_id": "42", "cluster": "local", "name": "train", "state": "RUNNING", "verdict": "recovering",
                   "verdict_reason": ""}, "attempts": [], "anomalies": [], "advice": [], "audit": [],
           "hang_evidence": [found]}
    monkeypatch.setattr(cli, "_get", lambda path: job)
    result = CliRunner().invoke(cli.app, ["jobs", "show", "42", "--cluster", "local"])
    assert result.exit_code == 0, result.output
    assert "hang evidence (attempt 0): collected, blame node, suspect nodes node2, in 2.5 s: rank 1 on node2" \
        in " ".join(result.output.split())
    assert "rank 1 on node2: suspect, clock_nanosleep in libc.so.6 through ctypes" in " ".join(result.output.split())
    assert "rank 0 on node1: victim, all_reduce" in result.output
