"""Hang and straggler tracking against real Redis and NATS: state survives in Redis, and of two
detector replicas sweeping the same deadlines only one reports the hang."""

import datetime as dt
import os

import pytest

from relaunch.common.consumers import Consumer
from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.schemas import AnomalyDetected, LogBatch
from relaunch.detector.adapters.follower import Follower
from relaunch.detector.adapters.hotstate import HotState
from relaunch.detector.domain import hangs, stragglers
from relaunch.detector.tracking import ProgressTracker, _track_of

pytestmark = pytest.mark.integration
T0 = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)


def line(it: int, tflops: float = 150.0) -> str:
    return (f" iteration {it:8d}/  500000 | consumed samples: {it * 512} | elapsed time per iteration (ms): 1000.0 | "
            f"throughput per GPU (TFLOP/s/GPU): {tflops} | lm loss: 2.1E+00 |")


async def anomalies(bus: Bus, cluster: str, job: str) -> list[AnomalyDetected]:
    sub = await bus.js.subscribe(subjects.event_anomaly(cluster, job), ordered_consumer=True)
    out = []
    try:
        while True:
            out.append(AnomalyDetected.model_validate_json((await sub.next_msg(timeout=0.5)).data))
    except Exception:
        pass
    await sub.unsubscribe()
    return out


@pytest.fixture
async def replicas(test_stack, unique):
    # The test stacks' floor (10 s, scripts/stack.sh), not the 10-minute default for real clusters.
    cluster = f"c{unique}"
    made = []
    for _ in range(2):
        bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
        state = HotState(test_stack["RELAUNCH_REDIS_URL"])
        made.append((bus, state, ProgressTracker(bus, state, cluster, hangs.HangPolicy(floor_s=10.0),
                                                  stragglers.StragglerPolicy())))
    yield cluster, made
    for bus, state, _ in made:
        await bus.close()
        await state.close()


async def test_hang_is_reported_once_by_two_replicas(replicas):
    cluster, ((bus, state, a), (_, _, b)) = replicas
    await state.track(cluster, "8", {"attempt": "0", "nodes": '["node1"]'})
    for it in range(1, 9):  # one step a second, each read in its own batch
        batch = LogBatch(cluster=cluster, job_id="8", attempt=0, path="/x", offset=it * 100, lines=[line(it)],
                         read_at=T0 + dt.timedelta(seconds=it))
        await (a if it % 2 else b).on_batch(batch)  # replicas share the work
    last = T0 + dt.timedelta(seconds=8)
    await a.sweep_once(last + dt.timedelta(seconds=5))
    assert await anomalies(bus, cluster, "8") == [], "5 s of silence after 1 s steps is not a hang yet"
    for tracker in (a, b, a):
        await tracker.sweep_once(last + dt.timedelta(seconds=15))
    (hang,) = await anomalies(bus, cluster, "8")
    assert hang.kind == "hang" and hang.attempt == 0 and hang.nodes == ["node1"] and "since step 8" in hang.summary
    assert hang.last_step == 8


async def test_new_attempt_starts_fresh_and_a_drop_is_a_straggler(replicas):
    cluster, ((bus, state, a), _) = replicas
    await state.track(cluster, "9", {"attempt": "0", "nodes": '["node2"]'})
    lines = [line(it, 150.0 + it % 3) for it in range(1, 31)] + [line(it, 90.0) for it in range(31, 51)]
    for i in range(0, len(lines), 5):
        await a.on_batch(LogBatch(cluster=cluster, job_id="9", attempt=0, path="/x", offset=i, lines=lines[i:i + 5],
                                  read_at=T0 + dt.timedelta(seconds=i)))
    found = await anomalies(bus, cluster, "9")
    assert [x.kind for x in found] == ["straggler"] and "below the baseline" in found[0].summary

    await a.on_attempt("9", 1, running=True, finished=False)
    data = await state.progress(cluster, "9")
    assert data["attempt"] == 1 and stragglers.StragglerState.from_dict(data["straggler"]) == stragglers.StragglerState()
    await a.on_attempt("9", 1, running=False, finished=True)
    assert await state.progress(cluster, "9") is None


async def test_a_detector_behind_on_progress_declares_no_hang_it_cannot_see(replicas):
    """Silence is judged only up to what has been read: with the deadline passed by the clock but not
    by the horizon (progress still unread), no hang; once the horizon passes the deadline, the hang."""
    cluster, ((bus, state, a), _) = replicas
    await state.track(cluster, "10", {"attempt": "0", "nodes": '["node3"]'})
    for it in range(1, 9):
        await a.on_batch(LogBatch(cluster=cluster, job_id="10", attempt=0, path="/x", offset=it * 100,
                                  lines=[line(it)], read_at=T0 + dt.timedelta(seconds=it)))
    last = T0 + dt.timedelta(seconds=8)
    await a.sweep_once(last + dt.timedelta(seconds=60), horizon=last + dt.timedelta(seconds=2))
    assert await anomalies(bus, cluster, "10") == [], "read only 2 s past the last step: not a hang yet"
    await a.sweep_once(last + dt.timedelta(seconds=60), horizon=last + dt.timedelta(seconds=30))
    (hang,) = await anomalies(bus, cluster, "10")
    assert hang.kind == "hang" and hang.last_step == 8


async def test_handled_until_is_the_first_unread_message_then_now(test_stack, unique):
    import time

    from relaunch.common.ingest import handled_until
    from relaunch.common.streams import ensure_streams
    from relaunch.common.schemas import ProgressReported

    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    try:
        await ensure_streams(bus.js, bus.service)
        spec = subjects.ConsumerSpec(f"t{unique}", subjects.SIGNALS, f"relaunch.signal.progress.c{unique}.>",
                                     ack_wait_s=30, max_deliver=3)
        from nats.js.api import AckPolicy, ConsumerConfig
        await bus.js.add_consumer(spec.stream.name, ConsumerConfig(
            durable_name=spec.durable, ack_policy=AckPolicy.EXPLICIT, filter_subject=spec.filter_subject))
        assert await handled_until(bus, Consumer(bus.service, spec, ProgressReported), 1e12) == 1e12, "nothing pending: up to now"
        before = time.time()
        for step in range(3):
            await bus.publish(subjects.signal_progress(f"c{unique}", "1"), ProgressReported(
                cluster=f"c{unique}", job_id="1", step=step, at=dt.datetime.now(dt.UTC)))
        after = time.time()
        now = after + 100
        until = await handled_until(bus, Consumer(bus.service, spec, ProgressReported), now)
        assert before - 1 <= until <= after + 1, "three unread: up to the first one's publish time"
        sub = await bus.js.pull_subscribe_bind(spec.durable, stream=spec.stream.name)
        msgs = await sub.fetch(3, timeout=5)
        for msg in msgs[:1]:
            await msg.ack_sync()
        assert before - 1 <= await handled_until(bus, Consumer(bus.service, spec, ProgressReported), now) <= after + 1
        for msg in msgs[1:]:
            await msg.ack_sync()
        assert await handled_until(bus, Consumer(bus.service, spec, ProgressReported), now) == now, "all read: up to now"
    finally:
        await bus.close()


async def test_a_steady_job_that_starts_printing_nan_losses_is_divergence_from_lines_and_from_reports(replicas):
    """A job whose divergence state has gone steady (ProgressTrack keeps its last step alone), then
    three non-finite losses in a row: one divergence anomaly, from log lines and from relaunch.client
    reports alike (tracking's two paths)."""
    from relaunch.common.outcomes import Delivery
    from relaunch.common.schemas import ProgressReported

    cluster, ((bus, state, a), _) = replicas
    await state.track(cluster, "11", {"attempt": "0", "nodes": '["node1"]'})
    steps = [f"step {i}/500 | loss 2.0 | 0.32 s/step" for i in range(1, 41)]
    bad = [f"step {i}/500 | loss nan | 0.32 s/step" for i in range(41, 44)]
    for i in range(0, 40, 4):
        await a.on_batch(LogBatch(cluster=cluster, job_id="11", attempt=0, path="/x", offset=i, lines=steps[i:i + 4],
                                  read_at=T0 + dt.timedelta(seconds=i)))
    assert _track_of(await state.progress(cluster, "11"))._div is None, "40 steps that went through: steady"
    await a.on_batch(LogBatch(cluster=cluster, job_id="11", attempt=0, path="/x", offset=40, lines=bad[:2],
                              read_at=T0 + dt.timedelta(seconds=41)))
    assert await anomalies(bus, cluster, "11") == [], "two non-finite losses are not enough"
    await a.on_batch(LogBatch(cluster=cluster, job_id="11", attempt=0, path="/x", offset=42, lines=bad[2:],
                              read_at=T0 + dt.timedelta(seconds=42)))
    (found,) = await anomalies(bus, cluster, "11")
    assert found.kind == "divergence" and found.signature_id == "divergence_nonfinite" and found.last_step == 43

    await state.track(cluster, "12", {"attempt": "0", "progress_seen": "1"})

    def report(step: int, loss: float | None) -> tuple[ProgressReported, Delivery]:
        return (ProgressReported(cluster=cluster, job_id="12", step=step, at=T0 + dt.timedelta(seconds=step),
                                 step_time_s=1.0, loss=loss), Delivery(f"s.{step}", 1, step))

    assert await a.on_progress_batch([report(i, None) for i in range(1, 31)]) == [None] * 30
    assert _track_of(await state.progress(cluster, "12"))._div is None, "30 plain reports: steady"
    await a.on_progress_batch([report(31, float("nan")), report(32, float("nan"))])
    assert await anomalies(bus, cluster, "12") == []
    assert await a.on_progress_batch([report(33, float("nan")), report(34, None)]) == [None, None]
    (found,) = await anomalies(bus, cluster, "12")
    assert found.kind == "divergence" and found.signature_id == "divergence_nonfinite"


async def followed_job_with_steps(tracker: ProgressTracker, bus: Bus, state: HotState, cluster: str, job: str,
                                  log_file) -> dt.datetime:
    """A job whose log the tracker's last look reads (an empty file, followed), with 8 one-second steps
    already handled; returns the time of the last one."""
    log_file.write_text("")
    await state.track(cluster, job, {"attempt": "0", "nodes": '["node4"]', "stdout": str(log_file),
                                     "stderr": str(log_file), "uid": str(os.geteuid())})
    tracker.last_look = Follower(bus, state, cluster, 0.1, batch_bytes=65536, log_roots=("/",)).read_job
    for it in range(1, 9):
        await tracker.on_batch(LogBatch(cluster=cluster, job_id=job, attempt=0, path=str(log_file),
                                        offset=it * 100, lines=[line(it)], read_at=T0 + dt.timedelta(seconds=it)))
    return T0 + dt.timedelta(seconds=8)


async def test_a_hang_is_declared_only_after_a_last_look_at_the_log(replicas, tmp_path):
    """The follower looks at a silent file only every few seconds: before a hang is declared, the job's
    log is read once more, and a line found there holds the verdict until it is handled."""
    cluster, ((bus, state, a), _) = replicas
    log_file = tmp_path / "11.out"
    last = await followed_job_with_steps(a, bus, state, cluster, "11", log_file)
    with log_file.open("a") as fh:  # printed after a long silence, not read yet
        fh.write(line(9) + "\n")
    await a.sweep_once(last + dt.timedelta(seconds=60))
    assert await anomalies(bus, cluster, "11") == [], "a line not read yet holds the verdict"
    assert int((await state.job(cluster, "11"))[f"off:{log_file}"]) == log_file.stat().st_size
    assert await state.due_hangs(cluster, (last + dt.timedelta(seconds=60)).timestamp()) == ["11"], "armed again"
    # Handled as the log consumer would: the deadline moves past the next sweep.
    await a.on_batch(LogBatch(cluster=cluster, job_id="11", attempt=0, path=str(log_file), offset=900,
                              lines=[line(9)], read_at=last + dt.timedelta(seconds=59)))
    await a.sweep_once(last + dt.timedelta(seconds=61))
    assert await anomalies(bus, cluster, "11") == []
    # Silent again for good: the last look finds nothing new, and the hang is declared.
    await a.sweep_once(last + dt.timedelta(seconds=59 + 600))
    (hang,) = await anomalies(bus, cluster, "11")
    assert hang.kind == "hang" and hang.last_step == 9


async def test_a_hung_job_that_keeps_printing_is_still_declared_hung(replicas, tmp_path):
    """The last look puts a deadline off once: lines without progress do not keep a hung job alive."""
    cluster, ((bus, state, a), _) = replicas
    log_file = tmp_path / "12.out"
    last = await followed_job_with_steps(a, bus, state, cluster, "12", log_file)
    for sweep_at in (60, 61):
        with log_file.open("a") as fh:
            fh.write("[rank0]: NCCL WARN still waiting for the collective\n")
        await a.sweep_once(last + dt.timedelta(seconds=sweep_at))
        if sweep_at == 60:
            assert await anomalies(bus, cluster, "12") == [], "the first look puts the deadline off"
    (hang,) = await anomalies(bus, cluster, "12")
    assert hang.kind == "hang" and hang.last_step == 8
