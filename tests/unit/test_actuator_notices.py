"""The reconciler tells the operator when a restart ends on a node its Advice excludes (the successor
left the hold before the exclusion was set): a warning, an audit entry, and CONVERGED without a second
requeue."""

import asyncio
import datetime as dt
import logging

import pytest
from memorybus import Streams, memory_bus

from relaunch.actuator.domain.launches import BatchStep
from relaunch.actuator.domain.observing import Observed
from relaunch.actuator.handlers import Reconciler, handle_advice
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Advice, AuditEntry, ReconcileStatus

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
async def memory():
    """The actuator's bus in memory (tests/unit/memorybus.py): (bus, what reached the streams)."""
    async with memory_bus("actuator") as pair:
        yield pair


class Slurm:
    def __init__(self, observed: Observed, batch: BatchStep | None = None) -> None:
        self.observed, self.steps, self.batch, self.batch_asked = observed, [], batch, 0

    async def observe(self, job_id):
        return self.observed

    async def batch_step(self, job_id, submitted):
        self.batch_asked += 1
        return self.batch

    async def run_command(self, argv):
        self.steps.append(argv)


class Holds:
    async def forget(self, cluster, job_id):
        pass


async def reconcile(memory, observed: Observed, caplog) -> tuple[Streams, Slurm]:
    (bus, streams), slurm = memory, Slurm(observed)
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    exclude_nodes=["node3"], issued_at=NOW, expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30))
    caplog.set_level(logging.WARNING, logger="relaunch.actuator.handlers")
    await handle_advice(Reconciler(bus, slurm, "act", Holds(), None), advice, None)
    return streams, slurm


async def test_a_successor_running_on_an_excluded_node_is_reported_and_not_requeued_again(memory, caplog):
    streams, slurm = await reconcile(memory, Observed(exists=True, state="RUNNING", restarts=1, nodes=("node3",)), caplog)
    assert slurm.steps == []
    (audit,) = streams.of(AuditEntry)
    assert audit.action == "restarted on an excluded node" and "RUNNING on node3" in audit.detail
    (final,) = streams.of(ReconcileStatus)
    assert final.status == "CONVERGED" and "which this Advice excludes" in final.detail
    assert any("which this Advice excludes" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_a_successor_elsewhere_converges_quietly(memory, caplog):
    streams, slurm = await reconcile(memory, Observed(exists=True, state="RUNNING", restarts=1, nodes=("node1",)), caplog)
    assert not streams.of(AuditEntry)
    assert [m.status for m in streams.of(ReconcileStatus)] == ["CONVERGED"]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


class RecordingHolds(Holds):
    async def touch(self, cluster, job_id):
        pass

    async def record(self, cluster, job_id, generation, attempt):
        pass


async def test_a_refused_launch_is_requeued_and_audited_under_a_key_the_decider_reads(memory, caplog):
    at = dt.datetime(2026, 12, 1, 7, 15, 44, tzinfo=dt.UTC)
    refused = Observed(exists=True, state="FAILED", reason="NonZeroExitCode", restarts=1, exit_code="1:0",
                       submitted=at, started=at, ended=at, nodes=("node1",))
    # Slurm's accounting: the successor's batch step was closed by slurmctld, never run (domain/launches.py).
    (bus, streams), slurm = memory, Slurm(refused, BatchStep("CANCELLED", ""))
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    issued_at=NOW, expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30))
    caplog.set_level(logging.WARNING, logger="relaunch.actuator.handlers")
    with pytest.raises(TemporaryError, match="requeuehold taken; verifying"):  # taken once, then looked at again
        await handle_advice(Reconciler(bus, slurm, "act", RecordingHolds(), None), advice, None)
    assert slurm.steps == [("scontrol", "requeuehold", "7")]  # the command the plan carries
    audits = [(p.body, p.msg_id) for p in streams.messages if isinstance(p.body, AuditEntry)]
    assert [(m.action, i) for m, i in audits][0] == ("launch refused", "actuator.c.7.1.launch-refused.1")
    assert "no attempt spent" in audits[0][0].detail


@pytest.mark.parametrize("batch", [BatchStep("FAILED", "1:0"), None], ids=["script-ran", "no-accounting"])
async def test_a_successor_that_failed_at_once_is_not_taken_for_a_refused_launch(memory, caplog, batch):
    # The issue-36 case: the successor started in the second of its requeue, printed its error and exited 1
    # in that second. Its batch step says the script ran (or accounting says nothing): no free requeue.
    at = dt.datetime(2026, 12, 1, 7, 15, 44, tzinfo=dt.UTC)
    failed = Observed(exists=True, state="FAILED", reason="NonZeroExitCode", restarts=1, exit_code="1:0",
                      submitted=at, started=at, ended=at, nodes=("node1",))
    (bus, streams), slurm = memory, Slurm(failed, batch)
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    issued_at=NOW, expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30))
    await handle_advice(Reconciler(bus, slurm, "act", RecordingHolds(), None), advice, None)
    assert slurm.steps == [] and slurm.batch_asked == 1
    assert not [m for m in streams.of(AuditEntry) if m.action == "launch refused"]
    (final,) = streams.of(ReconcileStatus)
    assert final.status == "CONVERGED" and "is FAILED" in final.detail


class RequeueingSlurm(Slurm):
    """Slurm as far as the requeue goes: requeuehold makes the successor (restart 1), held, SubmitTime = the
    second of the requeue; release unholds it."""

    def __init__(self, observed: Observed, requeued_at: dt.datetime) -> None:
        super().__init__(observed)
        self.requeued_at = requeued_at

    async def run_command(self, argv):
        self.steps.append(argv)
        second = self.requeued_at.replace(microsecond=0)
        if argv[1] == "requeuehold":
            self.observed = Observed(exists=True, state="PENDING", restarts=1, held=True, submitted=second,
                                     eligible_at=second + dt.timedelta(seconds=121))
        elif argv[1] == "release":
            self.observed = Observed(**{**self.observed.__dict__, "held": False})


@pytest.mark.parametrize("was", ["FAILED", "RUNNING"])
async def test_start_now_waits_from_the_second_that_revoked_the_credentials(memory, was):
    # docs/architecture.md: an attempt that had ended before its requeue was revoked at its EndTime (long past
    # here), so StartTime=now goes in within the requeue's second; one still running when requeued was revoked
    # by the requeue's own kill, so StartTime=now waits for the second after the successor's SubmitTime.
    # The handler reads the clock again: start early in a second, so that the requeue's second is still
    # the current one when it decides (a second boundary in between made the RUNNING case flaky under load).
    await asyncio.sleep(1.02 - dt.datetime.now(dt.UTC).microsecond / 1e6)
    (bus, _streams), now = memory, dt.datetime.now(dt.UTC)
    ended = now - dt.timedelta(seconds=3) if was == "FAILED" else None
    slurm = RequeueingSlurm(Observed(exists=True, state=was, restarts=0, ended=ended, exit_code="1:0"), now)
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    issued_at=NOW, expires_at=now + dt.timedelta(minutes=30))
    with pytest.raises(TemporaryError) as raised:
        await handle_advice(Reconciler(bus, slurm, "act", RecordingHolds(), None), advice, None)
    taken = [argv[1] for argv in slurm.steps]
    if was == "FAILED":
        assert taken == ["requeuehold", "release", "update"] and slurm.steps[-1][-1] == "StartTime=now"
    else:
        assert taken == ["requeuehold", "release"], "StartTime=now waits for the second after the requeue"
        assert "the second after the one that revoked" in str(raised.value)
        assert 0 < raised.value.delay <= 1.0
