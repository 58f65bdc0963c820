"""Checkpoint facts in a real Postgres ledger (migration 0014, docs/goodput.md): recorded once per attempt
and step whatever the ranks and redeliveries; an attempt's RUNNING time kept; two failures without a save
stop the job (rule no_checkpoint); a restart's Advice names the checkpoint to resume from."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import AnomalyDetected, CheckpointFact, JobObserved
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
DELIVERY = Delivery("s", 1, 1)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def observed(cluster, restarts=0, state="RUNNING"):
    return JobObserved(cluster=cluster, job_id="9", name="train", state=state, restarts=restarts,
                       nodes=["node1", "node2"], comment="relaunch:max_attempts=5", partition="gpu", observed_at=now())


def crash(cluster, attempt, step):
    return AnomalyDetected(anomaly_id=f"{cluster}.9.{attempt}.crash", cluster=cluster, job_id="9", attempt=attempt,
                           kind="crash", source="log", signature_id="xid_79", category="xid_79",
                           fault_domain="hardware", action="restart", summary="GPU fell off the bus",
                           detected_at=now(), last_step=step)


def fact(cluster, attempt, kind, step, at=None):
    return CheckpointFact(cluster=cluster, job_id="9", attempt=attempt, kind=kind, step=step, at=at or now())


async def test_facts_are_kept_once_and_running_time_is_recorded(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, state="PENDING"), DELIVERY)
    assert await ledger.pool.fetchval("SELECT running_at FROM attempts WHERE cluster=$1", cluster) is None
    await decider.on_job(observed(cluster), DELIVERY)
    running = await ledger.pool.fetchval("SELECT running_at FROM attempts WHERE cluster=$1", cluster)
    await decider.on_job(observed(cluster), DELIVERY)
    assert running is not None
    assert await ledger.pool.fetchval("SELECT running_at FROM attempts WHERE cluster=$1", cluster) == running
    for _ in range(3):  # three ranks' lines, or redeliveries
        await decider.on_checkpoint(fact(cluster, 0, "first_step", 1), DELIVERY)
        await decider.on_checkpoint(fact(cluster, 0, "saved", 100), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 0, "saved", 200), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 0, "save_started", None), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 0, "save_started", None), DELIVERY)
    rows = await ledger.pool.fetch("SELECT kind, step FROM checkpoint_facts WHERE cluster=$1 ORDER BY id", cluster)
    assert [(r["kind"], r["step"]) for r in rows] == [("first_step", 1), ("saved", 100), ("saved", 200),
                                                      ("save_started", None)]


async def test_two_failures_without_a_save_stop_the_job_and_a_restart_names_its_checkpoint(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 0, "saved", 1000), DELIVERY)
    await decider.on_anomaly(crash(cluster, 0, 1300), DELIVERY)
    for attempt in (1, 2):  # each further than the one before (no_progress does not apply), saving nothing
        await decider.on_job(observed(cluster, restarts=attempt), DELIVERY)
        await decider.on_anomaly(crash(cluster, attempt, 1300 + 100 * attempt), DELIVERY)
    advice = await ledger.pool.fetch("SELECT * FROM advice WHERE cluster=$1 ORDER BY generation", cluster)
    assert [a["operation"] for a in advice] == ["restart", "restart"]
    payloads = [json.loads(bytes(r["payload"])) for r in await ledger.pool.fetch(
        "SELECT payload FROM outbox WHERE subject LIKE 'relaunch.advice.%' AND msg_id LIKE $1 ORDER BY id",
        f"advice.{cluster}.%")]
    assert [p["resume_step"] for p in payloads] == [1000, 1000]
    stop = await ledger.pool.fetchrow(
        "SELECT detail FROM audit WHERE cluster=$1 AND action='stop'", cluster)
    detail = json.loads(stop["detail"])
    assert detail["rule"] == "no_checkpoint" and "step 1000, saved by attempt 0" in detail["reason"]
    assert await ledger.pool.fetchval("SELECT verdict FROM jobs WHERE cluster=$1", cluster) == "stopped"


async def test_the_api_reads_a_jobs_goodput_and_the_fleets_from_the_ledger(ledger, unique):
    from relaunch.api.adapters.ledger_read import LedgerReader

    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    start = now() - dt.timedelta(seconds=600)
    await decider.on_job(observed(cluster), DELIVERY)
    for kind, step, seconds in (("first_step", 1, 0), ("saved", 1000, 100), ("last_progress", 1300, 130)):
        await decider.on_checkpoint(fact(cluster, 0, kind, step, start + dt.timedelta(seconds=seconds)), DELIVERY)
    await decider.on_anomaly(crash(cluster, 0, 1300), DELIVERY)
    await decider.on_job(observed(cluster, restarts=1), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 1, "first_step", 1001), DELIVERY)
    reader = LedgerReader(ledger.pool)
    job = await reader.job(cluster, "9")
    figures = job["goodput"]
    (failure,) = figures["failures"]
    assert failure["checkpoint_step"] == 1000 and failure["failed_step"] == 1300 and failure["resumed_step"] == 1000
    assert failure["expected_resume_step"] == 1000 and failure["resumed_as_expected"] is True
    assert abs(failure["step_time_s"] - 0.1) < 1e-3 and abs(failure["parts_s"]["recomputation"] - 30) < 0.1
    assert failure["parts_s"]["detection"] > 400  # the anomaly is now; the last progress was 470 s ago
    assert failure["parts_s"]["recovery"] is not None and failure["parts_s"]["startup"] is not None
    assert figures["checkpoints"][0]["step"] == 1000 and figures["ettr"] is not None
    assert job["attempts"][1]["running_at"] is not None
    json.dumps(job, default=str)
    fleet = await reader.goodput(now(), now() - dt.timedelta(days=1), cluster)
    assert fleet["failures"] == 1 and fleet["lost_by_class_s"]["hardware"]["recomputation"] > 29
    assert fleet["failures_per_1000_node_hours"] is not None  # (the attempts ran for milliseconds here)


async def test_the_detector_publishes_facts_on_the_bus_and_the_decider_keeps_them(test_stack, ledger, unique):
    """Real NATS and Redis: save lines from two ranks, a hang with the attempt's last progress, a restarted
    attempt that loads the checkpoint and gets back past the failed step; each fact once in the ledger."""
    from relaunch.common import subjects
    from relaunch.common.connection import Bus
    from relaunch.common.schemas import LogBatch
    from relaunch.detector.adapters.hotstate import HotState
    from relaunch.detector.anomalies import AnomalyPublisher
    from relaunch.detector.domain import hangs, stragglers
    from relaunch.detector.tracking import ProgressTracker

    cluster = f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    state = HotState(test_stack["RELAUNCH_REDIS_URL"])
    try:
        publisher = AnomalyPublisher(bus, state)
        tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(floor_s=10.0), stragglers.StragglerPolicy(),
                                  anomalies=publisher)
        publisher.progress = tracker.progress_of
        await state.track(cluster, "9", {"attempt": "0", "nodes": '["node1"]'})
        t0 = now() - dt.timedelta(minutes=5)

        def step(it):
            return (f" iteration {it:8d}/  500000 | consumed samples: {it} | elapsed time per iteration (ms): 1000.0 |"
                    " lm loss: 2.1E+00 |")

        save = ["saving checkpoint at iteration       4 to /ckpt", "  successfully saved checkpoint from iteration"
                "       4 to /ckpt [ t 1/1, p 1/1 ]"]
        batches = [(0, [step(1), step(2)]), (0, [step(3), step(4)] + save + save), (0, [step(5), step(6)])]
        for i, (attempt, lines) in enumerate(batches):
            await tracker.on_batch(LogBatch(cluster=cluster, job_id="9", attempt=attempt, path="/x", offset=i,
                                            lines=lines, read_at=t0 + dt.timedelta(seconds=2 * i)))
        await tracker.sweep_once(t0 + dt.timedelta(seconds=40))  # the hang: its last progress is a fact
        await state.track(cluster, "9", {"attempt": "1"})
        loads = ["  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 4"]
        for i, lines in enumerate([loads + [step(5)], [step(6), step(7)]]):
            await tracker.on_batch(LogBatch(cluster=cluster, job_id="9", attempt=1, path="/x", offset=i, lines=lines,
                                            read_at=t0 + dt.timedelta(seconds=60 + i)))
        sub = await bus.js.subscribe(subjects.event_checkpoint(cluster, "9"), ordered_consumer=True)
        facts = []
        try:
            while True:
                facts.append(CheckpointFact.model_validate_json((await sub.next_msg(timeout=0.5)).data))
        except Exception:
            pass
        await sub.unsubscribe()
    finally:
        await bus.close()
        await state.close()
    assert [(f.attempt, f.kind, f.step) for f in facts] == [
        (0, "first_step", 1), (0, "save_started", 4), (0, "saved", 4), (0, "last_progress", 6),
        (1, "loaded", 4), (1, "first_step", 5), (1, "caught_up", 6)]
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    for f in facts + facts:  # and every redelivery
        await decider.on_checkpoint(f, DELIVERY)
    assert await ledger.pool.fetchval("SELECT count(*) FROM checkpoint_facts WHERE cluster=$1", cluster) == 7


async def test_the_ledger_notes_whether_the_successor_resumed_from_the_expected_checkpoint(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 0, "saved", 1000), DELIVERY)
    await decider.on_anomaly(crash(cluster, 0, 1300), DELIVERY)
    await decider.on_job(observed(cluster, restarts=1), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 1, "loaded", 1000), DELIVERY)
    await decider.on_checkpoint(fact(cluster, 1, "first_step", 3), DELIVERY)  # noted once: the load came first
    (row,) = await ledger.pool.fetch("SELECT detail FROM audit WHERE cluster=$1 AND action='resumed'", cluster)
    detail = json.loads(row["detail"])
    assert detail["as_expected"] is True and detail["by"] == "loaded" and detail["expected_step"] == 1000
    assert "resumed from the checkpoint expected (step 1000" in detail["reason"]
