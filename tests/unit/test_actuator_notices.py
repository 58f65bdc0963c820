"""The reconciler tells the operator when a restart ends on a node its Advice excludes (the successor
left the hold before the exclusion was set): a warning, an audit entry, and CONVERGED without a second
requeue."""

import datetime as dt
import logging

import nats.js.errors
import pytest

from relaunch.actuator.domain.observing import Observed
from relaunch.actuator.handlers import Reconciler, handle_advice
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Advice, AuditEntry, ReconcileStatus

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


class JetStream:
    async def get_last_msg(self, stream, subject):
        raise nats.js.errors.NotFoundError


class Bus:
    def __init__(self) -> None:
        self.js = JetStream()
        self.published: list[object] = []

    async def last_message(self, stream, subject):
        return None  # no newer Advice, no anomaly on record

    async def publish(self, subject, msg, msg_id):
        self.published.append(msg)


class Slurm:
    def __init__(self, observed: Observed) -> None:
        self.observed, self.steps = observed, []

    async def observe(self, job_id):
        return self.observed

    async def run_step(self, step, job_id, nodes=None):
        self.steps.append(step)


class Holds:
    async def forget(self, cluster, job_id):
        pass


async def reconcile(observed: Observed, caplog) -> tuple[Bus, Slurm]:
    bus, slurm = Bus(), Slurm(observed)
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    exclude_nodes=["node3"], issued_at=NOW, expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30))
    caplog.set_level(logging.WARNING, logger="relaunch.actuator.handlers")
    await handle_advice(Reconciler(bus, slurm, "act", Holds(), None), advice, None)
    return bus, slurm


async def test_a_successor_running_on_an_excluded_node_is_reported_and_not_requeued_again(caplog):
    bus, slurm = await reconcile(Observed(exists=True, state="RUNNING", restarts=1, nodes=("node3",)), caplog)
    assert slurm.steps == []
    (audit,) = [m for m in bus.published if isinstance(m, AuditEntry)]
    assert audit.action == "restarted on an excluded node" and "RUNNING on node3" in audit.detail
    (final,) = [m for m in bus.published if isinstance(m, ReconcileStatus)]
    assert final.status == "CONVERGED" and "which this Advice excludes" in final.detail
    assert any("which this Advice excludes" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_a_successor_elsewhere_converges_quietly(caplog):
    bus, slurm = await reconcile(Observed(exists=True, state="RUNNING", restarts=1, nodes=("node1",)), caplog)
    assert not [m for m in bus.published if isinstance(m, AuditEntry)]
    assert [m.status for m in bus.published if isinstance(m, ReconcileStatus)] == ["CONVERGED"]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


class RecordingBus(Bus):
    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []

    async def publish(self, subject, msg, msg_id):
        self.published.append(msg)
        self.ids.append(msg_id)


class StepSlurm(Slurm):
    @staticmethod
    def argv(step, job_id, nodes=None):
        return ["scontrol", step, job_id]


class RecordingHolds(Holds):
    async def touch(self, cluster, job_id):
        pass

    async def record(self, cluster, job_id, generation, attempt):
        pass


async def test_a_refused_launch_is_requeued_and_audited_under_a_key_the_decider_reads(caplog):
    at = dt.datetime(2026, 12, 1, 7, 15, 44, tzinfo=dt.UTC)
    refused = Observed(exists=True, state="FAILED", reason="NonZeroExitCode", restarts=1, exit_code="1:0",
                       submitted=at, started=at, ended=at, nodes=("node1",))
    bus, slurm = RecordingBus(), StepSlurm(refused)
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    issued_at=NOW, expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30))
    caplog.set_level(logging.WARNING, logger="relaunch.actuator.handlers")
    with pytest.raises(TemporaryError, match="step taken"):  # then the Advice is looked at again
        await handle_advice(Reconciler(bus, slurm, "act", RecordingHolds(), None), advice, None)
    assert slurm.steps == ["requeuehold"]
    audits = [(m, i) for m, i in zip(bus.published, bus.ids, strict=True) if isinstance(m, AuditEntry)]
    assert [(m.action, i) for m, i in audits][0] == ("launch refused", "actuator.c.7.1.launch-refused.1")
    assert "no attempt spent" in audits[0][0].detail
