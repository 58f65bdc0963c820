"""The decider against a real Postgres (fresh database per test) and NATS: migrations, one decision
per attempt under replays, the outbox, and what the policy rules read from the ledger (docs/policy.md)."""

import asyncio
import datetime as dt
import json

import pytest

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Advice, AnomalyDetected, JobObserved, ReconcileStatus
from relaunch.decider.adapters.ledger import migrations
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
NOW = dt.datetime.now(dt.UTC)
DELIVERY = Delivery("s", 1, 1)


@pytest.fixture
def ledger(fresh_ledger):
    return fresh_ledger


def observed(cluster, comment="relaunch:max_attempts=2", state="RUNNING", restarts=0, **kw):
    return JobObserved(cluster=cluster, job_id="5", name="train", state=state, restarts=restarts, nodes=["node1"],
                       comment=comment, observed_at=NOW, **kw)


def anomaly(cluster, attempt=0, **kw):
    base = dict(anomaly_id=f"{cluster}.5.{attempt}.crash", cluster=cluster, job_id="5", attempt=attempt,
                kind="crash", source="log", signature_id="segfault", category="segfault",
                fault_domain="unknown", action="restart", summary="segfault", detected_at=NOW)
    return AnomalyDetected(**{**base, **kw})


async def test_migrations_apply_once(ledger):
    assert await ledger.migrate() == [version for version, _ in migrations()]
    assert await ledger.migrate() == []


async def test_one_advice_per_attempt_and_the_outbox_publishes_it(ledger, test_stack, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    outbox = OutboxPublisher(bus, ledger)
    decider = Decider(ledger, outbox)
    try:
        await decider.on_job(observed(cluster), DELIVERY)
        for _ in range(3):  # redelivery of the same anomaly
            await decider.on_anomaly(anomaly(cluster), DELIVERY)
        rows = await ledger.pool.fetch("SELECT * FROM advice WHERE cluster=$1", cluster)
        assert len(rows) == 1 and rows[0]["generation"] == 1 and rows[0]["status"] == "PENDING"
        assert await outbox.publish_pending() == 2  # the Advice and its decision's audit entry
        assert await outbox.publish_pending() == 0
        audit = await bus.js.get_last_msg(subjects.EVENTS.name, subjects.event_audit(cluster, "5"))
        assert json.loads(audit.data)["action"] == "restart"
        msg = await bus.js.get_last_msg(subjects.ADVICE.name, subjects.advice(cluster, "5"))
        advice = Advice.model_validate_json(msg.data)
        assert advice.attempt == 0 and advice.operation == "restart" and advice.policy["max_attempts"] == 2

        # A crash between publish and mark_published re-sends: JetStream drops the duplicate.
        await ledger.pool.execute("UPDATE outbox SET published_at=NULL")
        assert await outbox.publish_pending() == 2
        info = await bus.js.stream_info(subjects.ADVICE.name, subjects_filter=subjects.advice(cluster, "5"))
        assert info.state.subjects == {subjects.advice(cluster, "5"): 1}

        status = ReconcileStatus(cluster=cluster, job_id="5", generation=1, status="CONVERGED",
                                 reason="desired state observed", at=NOW)
        await decider.on_reconcile(status, Delivery("s", 1, 77))
        await decider.on_reconcile(status, Delivery("s", 2, 77))
        row = await ledger.pool.fetchrow("SELECT status FROM advice WHERE cluster=$1", cluster)
        assert row["status"] == "CONVERGED"
        assert await ledger.pool.fetchval("SELECT count(*) FROM reconcile_steps WHERE cluster=$1", cluster) == 1
    finally:
        await bus.close()


async def test_budget_exhausted_stops_and_the_ledger_says_why(ledger, test_stack, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=1", state="FAILED"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster)
    assert job["verdict"] == "stopped" and "max_attempts=1" in job["verdict_reason"]
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 0
    assert await ledger.pool.fetchval("SELECT count(*) FROM audit WHERE cluster=$1 AND action='stop'", cluster) == 1


async def test_a_diverged_running_job_is_cancelled_and_its_verdict_says_so(ledger, test_stack, unique):
    """Divergence (docs/policy.md, "Divergence"): a terminate Advice, and once the actuator has cancelled
    the job the verdict is the final outcome, not "watching"."""
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, anomaly_id=f"{cluster}.5.0.divergence", kind="divergence",
                                     source="progress", signature_id="divergence_nonfinite", category="divergence",
                                     fault_domain="application", action="stop",
                                     summary="training diverged: the loss has been NaN in 3 consecutive reports"),
                             DELIVERY)
    row = await ledger.pool.fetchrow("SELECT operation, reason FROM advice WHERE cluster=$1", cluster)
    assert row["operation"] == "terminate" and "NaN" in row["reason"]
    status = ReconcileStatus(cluster=cluster, job_id="5", generation=1, status="CONVERGED",
                             reason="desired state observed", at=NOW)
    await decider.on_reconcile(status, Delivery("s", 1, 78))
    job = await ledger.pool.fetchrow("SELECT verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster)
    assert job["verdict"] == "stopped" and job["verdict_reason"].startswith("cancelled by relaunch")
    assert "NaN" in job["verdict_reason"]


async def test_malformed_options_are_observed_only(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=lots"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT mode, verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster)
    assert job["mode"] == "observe" and job["verdict"] == "observing" and "max_attempts must be" in job["verdict_reason"]
    # what act mode would have done, recorded (docs/policy.md, "Errors"; issue 40)
    assert "in act mode relaunch would have restarted it (within_budget)" in job["verdict_reason"]
    detail = await ledger.pool.fetchval("SELECT detail FROM audit WHERE cluster=$1 AND action='observe'", cluster)
    assert json.loads(detail)["would"]["action"] == "restart" and json.loads(detail)["would"]["rule"] == "within_budget"


async def test_decisions_on_one_job_are_serialised(ledger, unique):
    """Two deciders racing on the same anomaly (row lock): exactly one advice."""
    await ledger.migrate()
    cluster = f"c{unique}"
    a, b = Decider(ledger, OutboxPublisher(None, ledger)), Decider(ledger, OutboxPublisher(None, ledger))
    await a.on_job(observed(cluster), DELIVERY)
    await asyncio.gather(*(d.on_anomaly(anomaly(cluster), DELIVERY) for d in (a, b, a, b)))
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 1


# --- what the policy rules read and write (migration 0003) ----------------------------------------------

async def audits(ledger, cluster, action):
    rows = await ledger.pool.fetch("SELECT detail FROM audit WHERE cluster=$1 AND action=$2 ORDER BY id",
                                   cluster, action)
    return [json.loads(r["detail"]) for r in rows]


async def test_the_effective_policy_and_invalid_options_are_recorded_once_per_comment(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    loose = "relaunch:policy=pretrain,max_attempts=60"
    for _ in range(2):  # the observer publishes every change; the same comment is one audit entry
        await decider.on_job(observed(cluster, comment=loose), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT mode, policy_name, policy, option_errors FROM jobs WHERE cluster=$1",
                                     cluster)
    assert job["mode"] == "observe" and job["policy_name"] == "pretrain"
    assert json.loads(job["policy"])["max_attempts"] == 50
    assert "max_attempts=60 loosens policy 'pretrain'" in json.loads(job["option_errors"])[0]
    entries = await audits(ledger, cluster, "options_invalid")
    assert len(entries) == 1 and "loosens" in entries[0]["errors"][0]

    await decider.on_job(observed(cluster, comment="relaunch:policy=nope"), DELIVERY)
    assert len(await audits(ledger, cluster, "options_invalid")) == 2
    await decider.on_job(observed(cluster, comment="relaunch:policy=pretrain,max_attempts=5"), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT mode, policy FROM jobs WHERE cluster=$1", cluster)
    assert job["mode"] == "act" and json.loads(job["policy"])["max_attempts"] == 5


async def test_history_keeps_the_attempt_timeline_steps_and_restarts_per_class(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, 0, fault_domain="hardware", category="ecc_error", last_step=100),
                             DELIVERY)
    await decider.on_job(observed(cluster, comment="relaunch", restarts=1), DELIVERY)
    advice = await ledger.pool.fetchrow("SELECT fault_class FROM advice WHERE cluster=$1", cluster)
    assert advice["fault_class"] == "hardware"
    async with ledger.job_tx(cluster, "5") as tx:
        history = await tx.history()
    first, second = history.attempts
    assert (first.index, first.high_step, first.state) == (0, 100, "REQUEUED") and first.ended_at is not None
    assert first.started_at is not None and (second.index, second.high_step, second.ended_at) == (1, None, None)
    assert [(r.attempt, r.generation, r.fault_class) for r in history.restarts] == [(0, 1, "hardware")]
    assert history.restarts_by_class()["hardware"] == 1


async def test_no_progress_across_attempts_stops_and_the_ledger_says_why(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, 0, fault_domain="infrastructure", last_step=1000), DELIVERY)
    await decider.on_job(observed(cluster, comment="relaunch", restarts=1), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, 1, fault_domain="infrastructure", last_step=950), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster)
    assert job["verdict"] == "stopped" and "no further than the step 1000" in job["verdict_reason"]
    [stop] = await audits(ledger, cluster, "stop")
    assert stop["rule"] == "no_progress" and stop["attempt"] == 1 and stop["policy"] == "default"
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 1
    assert await ledger.pool.fetchval("SELECT last_step FROM anomalies WHERE cluster=$1 AND attempt=1", cluster) == 950


async def test_exit_code_93_from_the_scheduler_is_never_restarted(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch", state="FAILED", exit_code=93), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, source="scheduler", signature_id="scheduler_failed",
                                     category="scheduler_failed"), DELIVERY)
    [stop] = await audits(ledger, cluster, "stop")
    assert stop["rule"] == "do_not_restart"
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 0


async def test_a_scheduler_failure_waits_a_little_for_its_own_observation(ledger, unique):
    """The detector's anomaly may overtake the decider's copy of the observation that carries the exit code."""
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch"), DELIVERY)  # still RUNNING here
    failed = anomaly(cluster, source="scheduler", signature_id="scheduler_failed", category="scheduler_failed")
    with pytest.raises(TemporaryError):
        await decider.on_anomaly(failed, DELIVERY)
    assert await ledger.pool.fetchval("SELECT count(*) FROM anomalies WHERE cluster=$1", cluster) == 0
    await decider.on_anomaly(failed, Delivery("s", 5, 1))  # bounded: then it decides on what it has
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 1


async def test_application_faults_are_not_restarted_by_default(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=5"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster, fault_domain="application", category="gpu_xid_application"), DELIVERY)
    [stop] = await audits(ledger, cluster, "stop")
    assert stop["rule"] == "class_budget" and stop["fault_class"] == "application"
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 0


async def excluded_by(ledger, cluster, job, user_id, nodes=("node1",), refs=()):
    """An Advice of `job` (owned by `user_id`) that left `nodes` out, with these evidence refs."""
    async with ledger.job_tx(cluster, job) as tx:
        await tx.conn.execute("UPDATE jobs SET user_id=$3 WHERE cluster=$1 AND job_id=$2", cluster, job, user_id)
        await tx.conn.execute(
            "INSERT INTO advice (cluster, job_id, generation, attempt, operation, exclude_nodes, reason, "
            "evidence_refs, issued_at, expires_at) VALUES ($1,$2,1,0,'restart',$3,'r',$4,now(),now())",
            cluster, job, list(nodes), json.dumps(list(refs)))


async def test_node_history_across_jobs_reaches_attribution(ledger, unique):
    """Two other users' jobs were restarted without node1: a third job failing on node1 excludes it too."""
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    for job, user in (("7", 1001), ("8", 1002)):
        await excluded_by(ledger, cluster, job, user)
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=3"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    row = await ledger.pool.fetchrow("SELECT exclude_nodes, evidence_refs FROM advice WHERE cluster=$1 AND job_id='5'",
                                     cluster)
    assert row["exclude_nodes"] == ["node1"] and "other jobs" in row["evidence_refs"]


async def test_exclusions_made_on_history_alone_do_not_feed_the_history(ledger, unique):
    """Two other jobs left node1 out only because of its history: that is no new evidence against it,
    so a third job does not exclude it (no feedback loop); one with direct evidence still counts."""
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    history_only = ["anomaly:x", "node:node1:0.75:excluded for 2 other jobs in the last 24 h (1, 2)"]
    for job, user in (("7", 1001), ("8", 1002)):
        await excluded_by(ledger, cluster, job, user, refs=history_only)
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=3"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    row = await ledger.pool.fetchrow("SELECT exclude_nodes FROM advice WHERE cluster=$1 AND job_id='5'", cluster)
    assert row["exclude_nodes"] == []
    direct = ["node:node1:0.90:gpu-probe: failed", "node:node1:0.75:excluded for 2 other jobs"]
    async with ledger.job_tx(cluster, "8") as tx:
        await tx.conn.execute("UPDATE advice SET evidence_refs=$3 WHERE cluster=$1 AND job_id=$2",
                              cluster, "8", json.dumps(direct))
    await excluded_by(ledger, cluster, "9", 1003)
    async with ledger.job_tx(cluster, "5") as tx:
        history = await tx.node_history(["node1"], dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    assert sorted(e.job for e in history["node1"]) == ["8", "9"], history


async def test_an_operator_switch_to_observe_stops_advice(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster), DELIVERY)
    await ledger.pool.execute("INSERT INTO operator_overrides (cluster, job_id, mode, reason, actor) "
                              "VALUES ($1, '5', 'observe', 'maintenance', 'ops')", cluster)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster)
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 0
    assert job["verdict"] == "observing" and "operator switched the job to observe by ops" in job["verdict_reason"]


async def test_a_cleared_node_s_history_is_forgotten_by_the_decider(ledger, unique):
    """The same history as above, but an operator cleared node1 after a repair (the API's store writes
    the clearance): the third job's failure no longer excludes it, and its earlier readings are ignored."""
    from relaunch.api.adapters.overrides import OverrideStore

    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    for job, user in (("7", 1001), ("8", 1002)):
        await excluded_by(ledger, cluster, job, user)
    await ledger.pool.execute("INSERT INTO node_events (cluster, node, verdict, reasons, at) "
                              "VALUES ($1,'node1','failed','[\"GPU 2: XID 79\"]', now())", cluster)
    cleared = await OverrideStore(ledger.pool).clear_node(cluster, "node1", "GPU 2 reseated", "ana")
    assert cleared["forgotten_exclusions"] == 2 and cleared["actor"] == "ana"
    assert await OverrideStore(ledger.pool).clear_node(cluster, "nodeX", "", "") is None
    async with ledger.job_tx(cluster, "5") as tx:
        assert await tx.node_history(["node1"], dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)) == {}
        assert await tx.node_events(["node1"], dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)) == []
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=3"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    row = await ledger.pool.fetchrow("SELECT exclude_nodes FROM advice WHERE cluster=$1 AND job_id='5'", cluster)
    assert row["exclude_nodes"] == []
    # Exclusions after the clearance count again.
    await excluded_by(ledger, cluster, "9", 1003)
    async with ledger.job_tx(cluster, "5") as tx:
        history = await tx.node_history(["node1"], dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    assert [e.job for e in history["node1"]] == ["9"]
