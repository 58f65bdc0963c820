"""The decider against a real Postgres (fresh database per test) and NATS: migrations, one decision
per attempt under replays, the outbox."""

import asyncio
import datetime as dt

import asyncpg
import pytest

from relaunch.common import subjects
from relaunch.common.bus import Bus, Delivery
from relaunch.common.schemas import Advice, AnomalyDetected, JobObserved, ReconcileStatus
from relaunch.decider.adapters.ledger import Ledger, migrations
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
NOW = dt.datetime.now(dt.UTC)
DELIVERY = Delivery("s", 1, 1)


@pytest.fixture
async def ledger(test_stack, unique):
    base = test_stack["RELAUNCH_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"CREATE DATABASE itest_{unique}")
    ledger = await Ledger.connect(base.rsplit("/", 1)[0] + f"/itest_{unique}")
    yield ledger
    await ledger.close()
    await admin.execute(f"DROP DATABASE itest_{unique}")
    await admin.close()


def observed(cluster, comment="relaunch:max_attempts=2", state="RUNNING", restarts=0):
    return JobObserved(cluster=cluster, job_id="5", name="train", state=state, restarts=restarts, nodes=["node1"],
                       comment=comment, observed_at=NOW)


def anomaly(cluster, attempt=0):
    return AnomalyDetected(anomaly_id=f"{cluster}.5.{attempt}.crash", cluster=cluster, job_id="5", attempt=attempt,
                           kind="crash", source="log", signature_id="segfault", category="segfault",
                           fault_domain="unknown", action="restart", summary="segfault", detected_at=NOW)


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
        assert await outbox.publish_pending() == 1
        assert await outbox.publish_pending() == 0
        msg = await bus.js.get_last_msg(subjects.ADVICE.name, subjects.advice(cluster, "5"))
        advice = Advice.model_validate_json(msg.data)
        assert advice.attempt == 0 and advice.operation == "restart" and advice.policy["max_attempts"] == 2

        # A crash between publish and mark_published re-sends: JetStream drops the duplicate.
        await ledger.pool.execute("UPDATE outbox SET published_at=NULL")
        assert await outbox.publish_pending() == 1
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


async def test_malformed_options_are_observed_only(ledger, unique):
    await ledger.migrate()
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, comment="relaunch:max_attempts=lots"), DELIVERY)
    await decider.on_anomaly(anomaly(cluster), DELIVERY)
    job = await ledger.pool.fetchrow("SELECT mode, verdict, verdict_reason FROM jobs WHERE cluster=$1", cluster)
    assert job["mode"] == "observe" and job["verdict"] == "observing" and "max_attempts must be" in job["verdict_reason"]


async def test_decisions_on_one_job_are_serialised(ledger, unique):
    """Two deciders racing on the same anomaly (row lock): exactly one advice."""
    await ledger.migrate()
    cluster = f"c{unique}"
    a, b = Decider(ledger, OutboxPublisher(None, ledger)), Decider(ledger, OutboxPublisher(None, ledger))
    await a.on_job(observed(cluster), DELIVERY)
    await asyncio.gather(*(d.on_anomaly(anomaly(cluster), DELIVERY) for d in (a, b, a, b)))
    assert await ledger.pool.fetchval("SELECT count(*) FROM advice WHERE cluster=$1", cluster) == 1
