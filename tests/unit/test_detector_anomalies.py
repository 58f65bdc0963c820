"""The detector's one anomaly publisher: whatever found it (crash, hang, straggler), an anomaly is
published under its id as the Msg-Id, then marked in the hot state."""

import datetime as dt

import pytest

from memorybus import memory_bus
from relaunch.common.schemas import AnomalyDetected
from relaunch.detector.anomalies import AnomalyPublisher

NOW = dt.datetime(2026, 12, 1, 8, 0, tzinfo=dt.UTC)


class State:
    def __init__(self) -> None:
        self.marked = []

    async def mark_anomaly(self, cluster, job_id, attempt, kind, signature_id):
        self.marked.append((cluster, job_id, attempt, kind, signature_id))


@pytest.fixture
async def memory():
    async with memory_bus("detector") as pair:
        yield pair


@pytest.mark.parametrize("kind,signature", [("crash", "cuda_oom"), ("hang", "hang_no_progress"),
                                            ("straggler", "straggler_throughput")])
async def test_every_kind_leaves_through_the_one_publisher(memory, kind, signature):
    (bus, streams), state = memory, State()
    anomaly = AnomalyDetected(anomaly_id=f"c.7.0.{kind}", cluster="c", job_id="7", attempt=0, kind=kind,
                              source="progress", signature_id=signature, category=kind, fault_domain="unknown",
                              action="restart", summary="s", nodes=[], detected_at=NOW)
    await AnomalyPublisher(bus, state).publish(anomaly, NOW)
    assert [(p.body, p.msg_id) for p in streams.messages] == [(anomaly, f"c.7.0.{kind}")]
    assert state.marked == [("c", "7", 0, kind, signature)]
