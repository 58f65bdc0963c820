"""The detector's follower and handlers against real Redis and NATS."""

import datetime as dt
import os

import pytest

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import AnomalyDetected, JobObserved, LogBatch
from relaunch.detector.adapters.hotstate import HotState
from relaunch.detector.domain import hangs, stragglers
from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.detector.adapters.follower import Follower
from relaunch.detector.handlers import Detector
from relaunch.detector.domain.track import ProgressTrack
from relaunch.detector.tracking import ProgressTracker, high_step_in

pytestmark = pytest.mark.integration
DELIVERY = Delivery("s", 1, 1)


async def messages(bus: Bus, subject: str) -> list[bytes]:
    sub = await bus.js.subscribe(subject, ordered_consumer=True)
    out = []
    try:
        while True:
            out.append((await sub.next_msg(timeout=0.5)).data)
    except Exception:
        pass
    await sub.unsubscribe()
    return out


@pytest.fixture
async def parts(test_stack, unique):
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    state = HotState(test_stack["RELAUNCH_REDIS_URL"])
    cluster = f"c{unique}"
    follower = Follower(bus, state, cluster, 0.1, batch_bytes=64, log_roots=("/",))
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    detector = Detector(bus, state, follower, builtin_catalogue(), grace_s=0.5, tracker=tracker)
    yield cluster, bus, state, follower, detector
    await bus.close()
    await state.close()


def obs(cluster, path, state="RUNNING", restarts=0, age_s=0.0):
    return JobObserved(cluster=cluster, job_id="3", state=state, restarts=restarts, nodes=["node2"], stdout=str(path),
                       stderr=str(path), observed_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age_s),
                       user_id=os.geteuid(), group_id=os.getegid())


async def test_follower_publishes_each_line_once_in_small_batches(parts, tmp_path):
    cluster, bus, state, follower, detector = parts
    log = tmp_path / "job.out"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    await detector.on_job(obs(cluster, log), DELIVERY)
    await follower.read_job("3")
    await follower.read_job("3")  # nothing new: nothing published
    batches = [LogBatch.model_validate_json(m) for m in await messages(bus, subjects.signal_log(cluster, "3"))]
    assert len(batches) > 1 and all(len("\n".join(b.lines)) <= 64 for b in batches)
    assert [line for b in batches for line in b.lines] == [f"line {i}" for i in range(20)]
    assert (await state.job(cluster, "3"))[f"off:{log}"] == str(log.stat().st_size)


async def test_segfault_line_gives_one_anomaly_with_the_node(parts, tmp_path):
    cluster, bus, state, follower, detector = parts
    log = tmp_path / "job.out"
    log.write_text("step 1\nSegmentation fault (core dumped)\n")
    await detector.on_job(obs(cluster, log), DELIVERY)
    await follower.read_job("3")
    for data in await messages(bus, subjects.signal_log(cluster, "3")):
        await detector.on_log(LogBatch.model_validate_json(data), DELIVERY)
        await detector.on_log(LogBatch.model_validate_json(data), DELIVERY)  # redelivered
    found = [AnomalyDetected.model_validate_json(m) for m in await messages(bus, subjects.event_anomaly(cluster, "3"))]
    assert len(found) == 1 and found[0].signature_id == "segfault" and found[0].nodes == ["node2"]
    info, explained = await state.job_unless_anomaly(cluster, "3", 0)
    assert explained and info == await state.job(cluster, "3") and info["nodes"]
    assert await state.job_unless_anomaly(cluster, "3", 1) == (info, False)
    assert await state.job_unless_anomaly(cluster, "3", 0, kinds=("hang",)) == (info, False)
    assert await state.crash_context(cluster, "3", 0) == (info, True, None)
    track = ProgressTrack(0, 1000.0, 8, 8)
    for step in (1, 2, 7):
        track.observe_report(step, None, None, None, 1000.0 + step, 8, 8)
    await state.save_progress(cluster, "3", track.encode(), None)
    info2, explained, progress = await state.crash_context(cluster, "3", 0)
    assert (info2, explained, high_step_in(progress, 0), high_step_in(progress, 1)) == (info, True, 7, None)
    assert await detector.tracker.last_step("3", 0) == 7
    # a finished attempt's hash written with its progress state and hang deadline forgotten, in one call
    await state.save_progress(cluster, "3", track.encode(), 5.0)
    assert await state.due_hangs(cluster, 10.0) == ["3"]
    await state.track(cluster, "3", {"state": "FAILED", "attempt": "0"}, forget_progress=True)
    assert await state.progress(cluster, "3") is None and await state.due_hangs(cluster, 10.0) == []
    assert (await state.job(cluster, "3"))["state"] == "FAILED" and "3" in await state.followed(cluster)
    version = await state.followed_version(cluster)
    await state.track(cluster, "3", {"state": "RUNNING"})  # followed already: the version stays
    assert await state.followed_version(cluster) == version and await state.progress(cluster, "3") is None
    await state.untrack(cluster, "3")
    await state.track(cluster, "3", {"state": "RUNNING"})
    assert int(await state.followed_version(cluster)) == int(version) + 2


async def test_failure_without_a_known_line_falls_back_after_the_grace(parts, tmp_path):
    cluster, bus, state, follower, detector = parts
    log = tmp_path / "job.out"
    log.write_text("something unusual happened\n")
    await detector.on_job(obs(cluster, log), DELIVERY)
    with pytest.raises(TemporaryError):
        await detector.on_job(obs(cluster, log, state="FAILED"), DELIVERY)
    await detector.on_job(obs(cluster, log, state="FAILED", age_s=5), DELIVERY)
    found = [AnomalyDetected.model_validate_json(m) for m in await messages(bus, subjects.event_anomaly(cluster, "3"))]
    assert len(found) == 1 and found[0].source == "scheduler" and found[0].attempt == 0
    assert "3" not in await state.followed(cluster)


async def test_a_later_attempt_does_not_inherit_earlier_lines(parts, tmp_path):
    """A job first seen on attempt 1 (detector restarted): attempt 0's crash line is not blamed on it."""
    cluster, bus, state, follower, detector = parts
    log = tmp_path / "job.out"
    log.write_text("Segmentation fault (core dumped)\n")
    await detector.on_job(obs(cluster, log, restarts=1), DELIVERY)
    with open(log, "a") as fh:
        fh.write("attempt 1 runs fine\n")
    await follower.read_job("3")
    batches = [LogBatch.model_validate_json(m) for m in await messages(bus, subjects.signal_log(cluster, "3"))]
    assert [line for b in batches for line in b.lines] == ["attempt 1 runs fine"]
    assert all(b.attempt == 1 for b in batches)
