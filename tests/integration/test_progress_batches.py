"""The detector at scale, against real Redis and NATS: progress handled a fetch at a time leaves
exactly the state that handling it one report at a time leaves, and the follower reads only the
files that changed."""

import asyncio
import datetime as dt
import os

import pytest

from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import LogBatch, ProgressReported
from relaunch.detector.adapters.hotstate import HELD, HotState
from relaunch.detector.domain import hangs, stragglers
from relaunch.detector.adapters.follower import Follower
from relaunch.detector.tracking import ProgressTracker

pytestmark = pytest.mark.integration
T0 = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
DELIVERY = Delivery("s", 1, 1)
ME = str(os.geteuid())
"""Whose jobs these are (the follower reads a job's files only as its owner could: docs/security.md)."""


@pytest.fixture
async def redis_and_bus(test_stack, unique):
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    state = HotState(test_stack["RELAUNCH_REDIS_URL"])
    yield bus, state
    await bus.close()
    await state.close()


def report(cluster: str, job: str, step: int, seconds: float, throughput: float) -> ProgressReported:
    return ProgressReported(cluster=cluster, job_id=job, step=step, throughput=throughput, step_time_s=1.0,
                            at=T0 + dt.timedelta(seconds=seconds))


async def test_a_batch_leaves_the_state_one_by_one_handling_leaves(redis_and_bus, unique):
    bus, state = redis_and_bus
    one, many = f"a{unique}", f"b{unique}"
    trackers = {c: ProgressTracker(bus, state, c, hangs.HangPolicy(), stragglers.StragglerPolicy())
                for c in (one, many)}
    for cluster in (one, many):
        for job, attempt in (("1", "0"), ("2", "1")):
            await state.track(cluster, job, {"attempt": attempt, "options": '{"hang_timeout": 60}'})
    # Job 1 reports steadily, job 2 with a slow patch, job 3 is not observed yet; reports interleave.
    stream = []
    for i in range(40):
        stream.append(("1", i, i * 1.0, 100.0))
        stream.append(("2", i, i * 1.5, 100.0 if i < 25 else 40.0))
        if i % 10 == 0:
            stream.append(("3", i, i * 1.0, 100.0))
    for job, step, seconds, rate in stream:
        try:
            await trackers[one].on_progress(report(one, job, step, seconds, rate), DELIVERY)
        except TemporaryError:
            assert job == "3"
    results = []
    for start in range(0, len(stream), 16):  # batches that cut through each job's reports
        batch = [(report(many, *item), DELIVERY) for item in stream[start: start + 16]]
        results += await trackers[many].on_progress_batch(batch)

    assert [type(r) for r, (job, *_) in zip(results, stream) if job == "3"] == [TemporaryError] * 4
    assert all(r is None for r, (job, *_) in zip(results, stream) if job != "3")
    for job in ("1", "2"):
        assert await state.progress(many, job) == await state.progress(one, job)
        assert (await state.r.zscore(f"rl:hangdl:{many}", job)) == (await state.r.zscore(f"rl:hangdl:{one}", job))
        assert (await state.job(many, job)).get("progress_seen") == "1"
    assert await state.progress(many, "3") is None
    # The same straggler verdicts either way (the batch path looks only when a report closes a window).
    for job, attempt in (("1", 0), ("2", 1)):
        found = [await state.has_anomaly(c, job, attempt, kinds=("straggler",)) for c in (one, many)]
        assert found == [job == "2"] * 2, (job, found)


async def test_reports_of_an_older_attempt_change_nothing(redis_and_bus, unique):
    bus, state = redis_and_bus
    cluster = f"c{unique}"
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    await state.track(cluster, "5", {"attempt": "2"})
    await tracker.on_progress_batch([(report(cluster, "5", 7, 0, 10.0), DELIVERY)])
    before = await state.progress(cluster, "5")
    await state.track(cluster, "5", {"attempt": "1"})  # the job hash says an older attempt (a late replay)
    assert await tracker.on_progress_batch([(report(cluster, "5", 9, 5, 10.0), DELIVERY)]) == [None]
    assert await state.progress(cluster, "5") == before


async def test_the_follower_reads_only_files_that_changed(redis_and_bus, unique, tmp_path):
    bus, state = redis_and_bus
    cluster = f"c{unique}"
    follower = Follower(bus, state, cluster, 0.1, batch_bytes=1024, log_roots=("/",))
    read: list[str] = []
    real_read = follower.read_job

    async def counting_read(job_id):
        read.append(job_id)
        await real_read(job_id)

    follower.read_job = counting_read
    logs = {job: tmp_path / f"{job}.out" for job in ("1", "2")}
    for job, path in logs.items():
        path.write_text("starting\n")
        await state.track(cluster, job, {"attempt": "0", "stdout": str(path), "stderr": str(path), "uid": ME})
    await state.track(cluster, "3", {"attempt": "0", "stdout": str(tmp_path / "not-yet.out"), "uid": ME})

    await follower.pass_once()
    assert sorted(read) == ["1", "2"], "a restarted follower reads every job once; a missing file is skipped"
    read.clear()
    await follower.pass_once()
    assert read == [], "nothing changed: no Redis round trip per job"
    with logs["2"].open("a") as fh:
        fh.write("step 1\n")
    await follower.pass_once()
    assert read == ["2"]
    sub = await bus.js.subscribe(f"relaunch.signal.log.{cluster}.2", ordered_consumer=True)
    lines = []
    for _ in range(2):
        lines += LogBatch.model_validate_json((await sub.next_msg(timeout=2)).data).lines
    await sub.unsubscribe()
    assert lines == ["starting", "step 1"]

    read.clear()
    (tmp_path / "not-yet.out").write_text("hello\n")
    await follower.pass_once()
    assert read == ["3"], "a file that appears is read"
    read.clear()
    moved = tmp_path / "moved.out"
    moved.write_text("elsewhere\n")
    await state.track(cluster, "1", {"stdout": str(moved), "stderr": str(moved), "uid": ME})
    follower.refresh("1")  # what the detector does on a JobObserved
    await state.untrack(cluster, "2")
    await follower.pass_once()
    assert read == ["1"]
    assert "2" not in follower._paths and not follower._lanes, "an unfollowed job is forgotten"


async def test_two_replicas_taking_turns_never_work_from_a_stale_cached_state(redis_and_bus, unique, test_stack):
    """Each replica keeps the states it wrote decoded (statecache); when the other replica handled the
    job's reports in between, Redis' write token no longer matches and the state is read again, so
    the result is the state one replica alone would leave."""
    bus, state = redis_and_bus
    redis_url = test_stack["RELAUNCH_REDIS_URL"]
    alone, shared = f"a{unique}", f"s{unique}"
    other_state = HotState(redis_url)
    try:
        single = ProgressTracker(bus, state, alone, hangs.HangPolicy(), stragglers.StragglerPolicy())
        replicas = [ProgressTracker(bus, s, shared, hangs.HangPolicy(), stragglers.StragglerPolicy())
                    for s in (state, other_state)]
        for cluster in (alone, shared):
            await state.track(cluster, "1", {"attempt": "0"})
        reads: list[object] = []
        real = state.progress_many

        async def spy(cluster, job_ids, held=None):
            out = await real(cluster, job_ids, held)
            if cluster == shared:
                reads.append(out["1"][2])
            return out

        state.progress_many = spy
        turns = [0, 0, 1, 0, 1, 1, 0, 0]  # which replica handles each batch of 5 reports
        for n, turn in enumerate(turns):
            for cluster, tracker in ((alone, single), (shared, replicas[turn])):
                batch = [(report(cluster, "1", 5 * n + i, 5 * n + i, 100.0 if n < 6 else 50.0), DELIVERY)
                         for i in range(5)]
                assert await tracker.on_progress_batch(batch) == [None] * 5
        assert await state.progress(shared, "1") == await state.progress(alone, "1")
        assert (await state.r.zscore(f"rl:hangdl:{shared}", "1")) == (await state.r.zscore(f"rl:hangdl:{alone}", "1"))
        # replica 0's batches: the 1st (nothing yet), 2nd (its own write: held), 4th (after replica 1's:
        # read again), 7th (after replica 1's), 8th (its own: held)
        assert [r if r is HELD else type(r).__name__ for r in reads] == \
            ["NoneType", HELD, "dict", "dict", HELD]
    finally:
        await other_state.close()


async def test_a_cached_state_is_not_used_after_the_state_was_forgotten(redis_and_bus, unique):
    bus, state = redis_and_bus
    cluster = f"f{unique}"
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    await state.track(cluster, "1", {"attempt": "0"})
    await tracker.on_progress_batch([(report(cluster, "1", i, i, 10.0), DELIVERY) for i in range(10)])
    assert len(tracker.cache) == 1
    await state.forget_progress(cluster, "1")  # as when Redis lost it: Redis is the truth, not the cache
    await tracker.on_progress_batch([(report(cluster, "1", 30, 30, 10.0), DELIVERY)])
    data = await state.progress(cluster, "1")
    assert data["attempt"] == 0 and stragglers.StragglerState.from_dict(data["straggler"]).total == 1
    assert hangs.HangState.from_dict(data["hang"]).intervals == ()


async def test_quiet_files_are_looked_at_less_often_and_new_jobs_at_once(redis_and_bus, unique, tmp_path,
                                                                         monkeypatch):
    from relaunch.detector.adapters import follower as follower_module

    monkeypatch.setattr(follower_module, "QUIET_S", 0.3)
    bus, state = redis_and_bus
    cluster = f"q{unique}"
    follower = Follower(bus, state, cluster, 0.1, batch_bytes=1024, quiet_interval_s=2.0, log_roots=("/",))
    stat_calls: list[list[str]] = []
    real_sizes = follower_module.file_sizes

    def counting_sizes(paths):
        stat_calls.append(list(paths))
        return real_sizes(paths)

    monkeypatch.setattr(follower_module, "file_sizes", counting_sizes)
    logs = {job: tmp_path / f"{job}.out" for job in ("1", "2")}
    for job, path in logs.items():
        path.write_text("starting\n")
        await state.track(cluster, job, {"attempt": "0", "stdout": str(path), "stderr": str(path), "uid": ME})
    await follower.pass_once()
    assert len(stat_calls[-1]) == 2
    await asyncio.sleep(0.4)  # both files are quiet now
    await follower.pass_once()
    assert stat_calls[-1] == [], "a quiet file is not looked at on every pass"
    with logs["1"].open("a") as fh:
        fh.write("Traceback (most recent call last):\n")
    await follower.pass_once()
    assert stat_calls[-1] == []
    await follower.pass_once(everything=True)  # what happens once quiet_interval_s has passed
    assert len(stat_calls[-1]) == 2
    await follower.pass_once()
    assert stat_calls[-1] == [str(logs["1"])], "a file that grew is looked at on every pass again"

    # Another replica follows a new job: this follower sees it on its next pass (the followed set's
    # version changed), not PATHS_REFRESH_S later, and looks at its file on every pass.
    new = tmp_path / "3.out"
    new.write_text("hello\n")
    other = HotState(redis_url_of(state))
    try:
        await other.track(cluster, "3", {"attempt": "0", "stdout": str(new), "stderr": str(new), "uid": ME})
    finally:
        await other.close()
    version = await state.followed_version(cluster)
    await follower.pass_once()
    assert "3" in follower._paths and str(new) in stat_calls[-1]
    await state.track(cluster, "3", {"attempt": "0"})  # already followed: the version stays
    assert await state.followed_version(cluster) == version
    await state.untrack(cluster, "3")
    assert await state.followed_version(cluster) != version
    await follower.pass_once()
    assert "3" not in follower._paths


async def test_files_silent_for_a_minute_are_looked_at_every_cold_interval(redis_and_bus, unique, tmp_path,
                                                                          monkeypatch):
    """The three spans (follower.QUIET_S, COLD_S) and their intervals, with the loop's time passed in."""
    from relaunch.detector.adapters import follower as follower_module

    bus, state = redis_and_bus
    cluster = f"c{unique}"
    follower = Follower(bus, state, cluster, 0.1, batch_bytes=1024, quiet_interval_s=1.0, cold_interval_s=5.0,
                        log_roots=("/",))
    stat_calls: list[list[str]] = []
    real_sizes = follower_module.file_sizes

    observed_meanwhile: list[str] = []

    def counting_sizes(paths):
        stat_calls.append(sorted(paths))
        for job in observed_meanwhile:  # a JobObserved handled while the pass waits for its stat() calls
            follower.refresh(job)
        return real_sizes(paths)

    monkeypatch.setattr(follower_module, "file_sizes", counting_sizes)
    busy, silent = tmp_path / "busy.out", tmp_path / "silent.out"
    for job, path in (("1", busy), ("2", silent)):
        path.write_text("starting\n")
        await state.track(cluster, job, {"attempt": "0", "stdout": str(path), "stderr": str(path), "uid": ME})
    both = sorted([str(busy), str(silent)])
    t = 1000.0
    await follower.pass_once(now=t)  # newly followed: both looked at, both read
    assert stat_calls[-1] == both
    await follower.pass_once(now=t + 0.5)
    assert stat_calls[-1] == both, "a newly followed job's files are looked at on every pass"
    for step in range(1, 60):  # the busy job prints every second; both are quiet-tier after 10 s
        with busy.open("a") as fh:
            fh.write(f"step {step}\n")
        await follower.pass_once(now=t + step)
    assert stat_calls[-1] == both, "within a minute of growing, a file is looked at every quiet interval"
    await follower.pass_once(now=t + 60)  # cold_interval_s after the last pass over every file (t + 55)
    assert stat_calls[-1] == both
    await follower.pass_once(now=t + 60.5)
    assert stat_calls[-1] == [str(busy)], "a file silent for a minute is not looked at every pass"
    await follower.pass_once(now=t + 61)
    assert stat_calls[-1] == [str(busy)], "nor every quiet interval"
    with silent.open("a") as fh:
        fh.write("Traceback (most recent call last):\n")
    calls = len(stat_calls)
    for tick in (61.5, 62, 63, 64, 64.9):
        await follower.pass_once(now=t + tick)
    assert len(stat_calls) == calls + 5 and all(str(silent) not in c for c in stat_calls[calls:])
    assert int((await state.job(cluster, "2")).get(f"off:{silent}", "0")) == len("starting\n")
    await follower.pass_once(now=t + 65)
    assert stat_calls[-1] == both
    assert int((await state.job(cluster, "2"))[f"off:{silent}"]) == silent.stat().st_size, "the line is read"
    await follower.pass_once(now=t + 65.1)
    assert stat_calls[-1] == both, "a file that grew is looked at on every pass again"
    await follower.pass_once(now=t + 65.2, everything=True)
    assert stat_calls[-1] == both
    observed_meanwhile.append("2")
    await follower.pass_once(now=t + 130)  # every file, and the job's files looked up again meanwhile
    observed_meanwhile.clear()
    await follower.pass_once(now=t + 130.1)
    assert stat_calls[-1] == [str(silent)], "a job observed again is looked at on every pass"


def redis_url_of(state: HotState) -> str:
    kwargs = state.r.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


async def test_batches_handled_at_once_apply_a_jobs_reports_in_order(redis_and_bus, unique):
    """consume_batch hands the detector two batches at a time: a job's later batch waits for its earlier
    one, so nothing is lost to two batches reading the same state (jobs in one batch only go on)."""
    bus, state = redis_and_bus
    one, both = f"o{unique}", f"b{unique}"
    for cluster in (one, both):
        for job in ("1", "2", "3"):
            await state.track(cluster, job, {"attempt": "0"})
    sequential = ProgressTracker(bus, state, one, hangs.HangPolicy(), stragglers.StragglerPolicy())
    concurrent = ProgressTracker(bus, state, both, hangs.HangPolicy(), stragglers.StragglerPolicy())
    plan = [[("1", 0), ("1", 1), ("2", 0)], [("1", 2), ("3", 0), ("1", 3)], [("2", 1), ("1", 4)]]

    def batch(cluster, entries):
        return [(report(cluster, job, step, step * 1.0 + int(job), 50.0), DELIVERY) for job, step in entries]

    for entries in plan:
        assert await sequential.on_progress_batch(batch(one, entries)) == [None] * len(entries)
    results = await asyncio.gather(*(concurrent.on_progress_batch(batch(both, entries)) for entries in plan))
    assert results == [[None] * len(entries) for entries in plan]
    for job in ("1", "2", "3"):
        assert await state.progress(both, job) == await state.progress(one, job), job
    assert stragglers.StragglerState.from_dict((await state.progress(both, "1"))["straggler"]).total == 5
    assert len(concurrent._lanes) == 0, "no job keeps a lane once its batches are done"


async def test_a_state_written_by_an_older_release_is_read(redis_and_bus, unique):
    """Before write tokens, rl:prog held the JSON alone, and then '<token> <JSON>' before the compact form
    (domain/track.py): both are still read (and rewritten in the compact form, with a token)."""
    import orjson

    from relaunch.detector.domain.track import decode_record

    bus, state = redis_and_bus
    cluster = f"l{unique}"
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    await state.track(cluster, "1", {"attempt": "0"})
    await tracker.on_progress_batch([(report(cluster, "1", i, i, 10.0), DELIVERY) for i in range(6)])
    for step, token in ((6, b""), (7, b"oldrelease.1 ")):  # the JSON alone, then with a token
        raw = await state.raw.get(f"rl:prog:{cluster}:1")
        assert raw.partition(b" ")[2].startswith(b"B")
        older = token + orjson.dumps(decode_record(raw.partition(b" ")[2]))
        await state.raw.set(f"rl:prog:{cluster}:1", older)
        tracker.cache.drop("1")
        await tracker.on_progress_batch([(report(cluster, "1", step, step, 10.0), DELIVERY)])
        data = await state.progress(cluster, "1")
        assert stragglers.StragglerState.from_dict(data["straggler"]).total == step + 1
        stored = await state.raw.get(f"rl:prog:{cluster}:1")
        assert not stored.startswith(b"{") and stored.partition(b" ")[2].startswith(b"B")


async def test_an_unreadable_state_starts_tracking_afresh_and_loses_no_report(redis_and_bus, unique):
    """A stored state that is neither form, or a record whose fields are malformed, is logged and replaced:
    the batch's reports are applied to a fresh state and acknowledged, never failed over and over."""
    bus, state = redis_and_bus
    cluster = f"u{unique}"
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    await state.track(cluster, "1", {"attempt": "0"})
    for stored in (b"w.1 B\x01\x05", b'w.2 {"attempt": 0, "hang": {"v": 1}, "straggler": {"v": 2}}'):
        await state.raw.set(f"rl:prog:{cluster}:1", stored)
        tracker.cache.drop("1")
        results = await tracker.on_progress_batch([(report(cluster, "1", i, i, 10.0), DELIVERY) for i in range(3)])
        assert results == [None] * 3
        data = await state.progress(cluster, "1")
        assert stragglers.StragglerState.from_dict(data["straggler"]).total == 3, stored


async def test_every_batch_the_progress_tracker_holds_at_once_is_delivered(redis_and_bus, unique):
    """detector-progress's durable lets the three batches in the tracker and the one asked for next all
    be delivered unacknowledged (consumers.DETECTOR_PROGRESS.max_ack_pending); the server's default
    of 1,000 stopped the third batch of 512."""
    from dataclasses import replace

    from relaunch.common import consumers, subjects
    from relaunch.common.ingest import BatchPuller, ensure_durable

    bus, _ = redis_and_bus
    cluster = f"mp{unique}"
    real = consumers.DETECTOR_PROGRESS
    consumer = replace(real, spec=replace(real.spec, durable=f"mp{unique}",
                                          filter_subject=subjects.signal_progress(cluster, "*")))
    assert await ensure_durable(bus, consumer)
    body = report(cluster, "1", 1, 1.0, 100.0).model_dump_json().encode()
    for i in range(3 * consumer.batch + 10):
        await bus.nc.publish(subjects.signal_progress(cluster, str(i % 50)), body)
    await bus.nc.flush()
    await asyncio.sleep(0.5)  # stored
    puller = await BatchPuller(bus, consumer).start()
    try:
        taken = [len(await puller.fetch(consumer.batch, 2.0)) for _ in range(3)]  # none acknowledged
        # nats-py's reader hands the messages straight to the puller (ingest._Handoff), no queue between:
        # if a nats-py release changes that, the puller falls back to a callback and this says so
        assert type(puller._sub._pending_queue).__name__ == "_Handoff" and puller._sub.pending_msgs == 0
    finally:
        await puller.close()
        await bus.js.delete_consumer(subjects.SIGNALS.name, consumer.spec.durable)
    assert taken == [consumer.batch] * 3


async def test_plain_reports_are_stored_as_lines_after_the_state_the_replica_holds(redis_and_bus, unique, test_stack):
    """Most reports append a line (track.report_delta) after the state instead of writing it whole: the
    state key stays as it was, another replica reads the state with the lines applied, the whole state
    is written again once the lines reach tracking.LINES_MAX, and an append onto a state that another
    replica replaced meanwhile is refused and the whole state written instead (as before lines)."""
    from relaunch.detector.domain.track import decode_record, from_record
    from relaunch.detector.tracking import LINES_MAX

    def track_of_stored(stored: bytes) -> dict:
        return decode_record(stored.partition(b" ")[2])

    bus, state = redis_and_bus
    cluster, single = f"l{unique}", f"m{unique}"
    tracker = ProgressTracker(bus, state, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
    alone = ProgressTracker(bus, state, single, hangs.HangPolicy(), stragglers.StragglerPolicy())
    for c in (cluster, single):
        await state.track(c, "1", {"attempt": "0"})
    key, lines_key = f"rl:prog:{cluster}:1", f"rl:progd:{cluster}:1"
    step = 0

    async def batch(n: int, who: ProgressTracker = tracker) -> None:
        nonlocal step
        for c, t in ((cluster, who), (single, alone)):
            items = [(report(c, "1", step + i, step + i, 100.0), DELIVERY) for i in range(n)]
            assert await t.on_progress_batch(items) == [None] * n
        step += n

    await batch(3)  # nothing held yet: the whole state
    whole = await state.raw.get(key)
    assert not await state.raw.exists(lines_key)
    await batch(2)
    await batch(1)
    assert await state.raw.get(key) == whole, "the state key is not written again"
    lines = await state.raw.get(lines_key)
    assert lines.count(b"\n") == 3 and lines.startswith(whole.partition(b" ")[0] + b" 3 100.0 1.0 - "), \
        "the lines follow the token of the state they extend"
    assert 0 < await state.raw.ttl(lines_key) <= 14 * 86400
    other = HotState(test_stack["RELAUNCH_REDIS_URL"])
    try:
        assert await other.progress(cluster, "1") == await state.progress(single, "1"), \
            "another replica reads the state with the lines applied"
        assert await state.r.zscore(f"rl:hangdl:{cluster}", "1") == await state.r.zscore(f"rl:hangdl:{single}", "1")

        rewritten = False
        while not rewritten:
            await batch(1)
            rewritten = await state.raw.get(key) != whole
            assert len(await state.raw.get(lines_key) or b"") <= LINES_MAX
        assert not await state.raw.exists(lines_key), "the whole state again: no lines after it"
        assert step > 20, "about 30 reports of lines before the whole state is written again"

        # Another replica writes the whole state while this one holds the older one: this one's lines
        # are refused, and its whole state is written (the last writer's, as without lines).
        await batch(2)
        real, refused = state.progress_many, []

        async def then_the_other_replica_writes(c, job_ids, held=None):
            out = await real(c, job_ids, held)
            if c == cluster:  # between this replica's read and its save
                await other.save_progress(cluster, "1", (await other.raw.get(key)).partition(b" ")[2], 1.0)
            return out

        real_save = state.save_progress_many

        async def saving(c, saves):
            written = await real_save(c, saves)
            refused.extend(s[0] for s, token in zip(saves, written) if token is None)
            return written

        state.progress_many, state.save_progress_many = then_the_other_replica_writes, saving
        await batch(1)
        state.progress_many, state.save_progress_many = real, real_save
        assert refused == ["1"], "the lines were refused"
        assert not await state.raw.exists(lines_key)
        assert await state.progress(cluster, "1") == await state.progress(single, "1"), "this replica's whole state"
        assert await state.r.zscore(f"rl:hangdl:{cluster}", "1") == await state.r.zscore(f"rl:hangdl:{single}", "1")

        # A replica of an older release writes the whole state without deleting the lines: they follow
        # another write's token, so they are not applied, and this replica writes its whole state.
        await batch(2)
        stored = await state.raw.get(key)
        await state.raw.set(key, b"older-release-token " + stored.partition(b" ")[2])
        assert await state.raw.exists(lines_key)
        assert await other.progress(cluster, "1") == track_of_stored(stored), "the lines are not applied"
        await batch(1)
        assert not await state.raw.exists(lines_key)
        assert from_record(await state.progress(cluster, "1")).total == \
            from_record(track_of_stored(stored)).total + 1

        # Lines that cannot be read: the state is unreadable, tracking starts afresh (no crash).
        await batch(1, ProgressTracker(bus, other, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy()))
        await state.raw.set(lines_key, (await state.raw.get(key)).partition(b" ")[0] + b" garbage\n")
        assert await other.progress(cluster, "1") is None
        fresh = ProgressTracker(bus, other, cluster, hangs.HangPolicy(), stragglers.StragglerPolicy())
        assert await fresh.on_progress_batch([(report(cluster, "1", step, step, 100.0), DELIVERY)]) == [None]
        assert from_record(await state.progress(cluster, "1")).total == 1
    finally:
        await other.close()
