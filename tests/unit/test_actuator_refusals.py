"""A reconcile step Slurm keeps refusing: quiet at first, then a warning and an audit entry that say
what is refused, for how long and what Slurm's words likely mean; repeated at most every REPEAT_S."""

import datetime as dt
import logging
import os
import stat

import pytest
from memorybus import memory_bus

from relaunch.actuator.adapters.slurm import Slurm
from relaunch.actuator.domain.observing import Observed
from relaunch.actuator.domain.reconciling import Plan
from relaunch.actuator.domain.refusals import WARN_AFTER_S, Refusals, describe, hint
from relaunch.actuator.handlers import Reconciler
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Advice, AuditEntry

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
DB_INDEX = "slurm_update error: Job update not available right now, the DB index is being set, try again in a bit"
KEY = ("c", "7", 1, "release")


def test_a_short_refusal_says_nothing():
    r = Refusals()
    for t in range(0, int(WARN_AFTER_S), 2):  # every 2 s for just under WARN_AFTER_S
        assert r.refused(KEY, "busy", now=1000.0 + t) is None
    past = r.accepted(KEY)
    assert past is not None and past.count == 15 and past.warnings == 0
    assert r.accepted(KEY) is None and len(r) == 0


def test_a_lasting_refusal_warns_once_then_every_repeat_interval():
    r = Refusals()
    due = [t for t in range(0, 700, 2) if r.refused(KEY, DB_INDEX, now=float(t)) is not None]
    assert due == [30, 330, 630]
    assert r.refused(KEY, DB_INDEX, now=700.0) is None


def test_steps_and_advices_are_tracked_apart_and_forgotten_with_their_advice():
    r = Refusals()
    other_step, other_advice = ("c", "7", 1, "exclude"), ("c", "7", 2, "release")
    r.refused(KEY, "x", 0.0)
    r.refused(other_step, "x", 20.0)
    r.refused(other_advice, "x", 25.0)
    assert r.refused(KEY, "x", 31.0) is not None  # its own 31 s, not the others'
    assert r.refused(other_step, "x", 31.0) is None
    r.forget("c", "7", 1)
    assert len(r) == 1 and r.accepted(other_advice) is not None


def test_tracking_is_bounded():
    r = Refusals(max_tracked=3)
    for job in range(10):
        r.refused(("c", str(job), 1, "release"), "x", 0.0)
    assert len(r) == 3 and r.accepted(("c", "9", 1, "release")) is not None
    assert r.accepted(("c", "0", 1, "release")) is None


def test_the_db_index_refusal_is_explained_and_unknown_texts_are_quoted_as_they_are():
    assert "held job never starts" in hint(DB_INDEX)
    assert hint("Unable to contact slurm controller (connect failure)").startswith("slurmctld is not reachable")
    assert hint("something new") == ""
    r = Refusals()
    r.refused(KEY, "something new", 0.0)
    due = r.refused(KEY, "something new", 45.0)
    text = describe("release", "scontrol release 7", due)
    assert text == ("Slurm has refused release (scontrol release 7) 2 times over 45 s; still retrying every few "
                    "seconds until the Advice expires. Last refusal: something new")


# -- the reconciler, with the real Slurm adapter running a stand-in `scontrol` that refuses ----------

@pytest.fixture
async def memory():
    """The actuator's bus in memory (tests/unit/memorybus.py): (bus, what reached the streams)."""
    async with memory_bus("actuator") as pair:
        yield pair


class Holds:
    async def record(self, *args):
        pass


@pytest.fixture
def refusing_slurm(tmp_path):
    """scontrol that refuses every command the way Slurm 22.05 refuses updates of a job stuck in accounting."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho '{DB_INDEX}' >&2\nexit 1\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    return Slurm(timeout_s=5, env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})


async def test_the_reconciler_warns_and_audits_a_lasting_refusal_and_keeps_retrying(refusing_slurm, memory, caplog):
    (bus, streams), clock = memory, [0.0]
    rec = Reconciler(bus, refusing_slurm, "act", Holds(), None)
    rec.clock = lambda: clock[0]
    advice = Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", reason="r",
                    exclude_nodes=[], issued_at=NOW, expires_at=NOW + dt.timedelta(minutes=30))
    step = Plan("step", "step taken", "release the held successor", step="release",
                argv=("scontrol", "release", "7"), audit="scontrol release 7")
    observed = Observed(exists=True, state="PENDING", restarts=1, held=True)
    caplog.set_level(logging.WARNING, logger="relaunch.actuator.handlers")
    for t in (0.0, 2.0, 31.0, 33.0):
        clock[0] = t
        with pytest.raises(TemporaryError):  # retried: nak with a delay, never a terminal outcome
            await rec._take_step(advice, step, observed)
    audits = streams.of(AuditEntry)
    assert [(a.action, a.idempotency_key) for a in audits] == [("release refused", "actuator.c.7.1.release.1.refused.1")]
    assert "refused release (scontrol release 7) 3 times over 31 s" in audits[0].detail
    assert "the DB index is being set" in audits[0].detail and "held job never starts" in audits[0].detail
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "advice c/7 gen 1: Slurm has refused release" in warnings[0]
