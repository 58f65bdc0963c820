"""Progress reports are bound to their job by a key its own log printed (issue 35, docs/security.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import contextlib

from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.progress_keys import key_line, keys_in
from relaunch.common.schemas import LogBatch, ProgressReported
from relaunch.detector.binding import ProgressBinding

NOW = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
KEY = "0123456789abcdef0123456789abcdef"


class MemoryKeys:
    def __init__(self):
        self.sets: dict[tuple[str, str], set[str]] = {}
        self.cached: dict[tuple[str, str], set[str]] = {}  # (ProgressKeys': what this process knows already)

    async def add(self, cluster, job_id, keys):
        self.sets.setdefault((cluster, job_id), set()).update(keys)

    async def known(self, cluster, wanted):
        return {job: keys & self.sets.get((cluster, job), set()) for job, keys in wanted.items()}


def report(job: str, key: str | None, loss: float | None = None) -> tuple[ProgressReported, None]:
    return ProgressReported(cluster="c", job_id=job, step=1, at=NOW, key=key, loss=loss), None


def test_keys_are_read_through_launcher_prefixes_and_only_as_printed():
    lines = [key_line(KEY, "7"), f"0: [rank0]: {key_line(KEY[::-1], '7')}",
             "(RayTrainWorker pid=12, ip=10.0.0.5) relaunch: progress key abcdefabcdefabcd (job 7)",
             "relaunch: progress key NOTHEX", "relaunch: progress key abc"]
    assert keys_in(lines) == [KEY, KEY[::-1], "abcdefabcdefabcd"]


def test_a_report_counts_only_with_a_key_its_own_jobs_log_printed():
    keys = MemoryKeys()
    binding = ProgressBinding(keys, "c")
    handled = []

    async def handle(items):
        handled.extend(msg.job_id for msg, _ in items)
        return [None] * len(items)

    async def run():
        await binding.on_log(LogBatch(cluster="c", job_id="7", attempt=0, path="/x", offset=0,
                                      lines=[key_line(KEY, "7")], read_at=NOW))
        return await binding.wrap(handle)([report("7", KEY), report("8", KEY, float("nan")), report("7", None),
                                           report("7", "f" * 32)])
    results = asyncio.run(run())
    assert handled == ["7"]
    assert results[0] is None
    assert isinstance(results[1], TemporaryError)  # job 8's log never printed job 7's key
    assert isinstance(results[2], PermanentError) and "no key" in str(results[2])
    assert isinstance(results[3], TemporaryError)


def test_the_reporter_prints_its_key_and_sends_it():
    from relaunch.client.progress import ProgressReporter
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        reporter = ProgressReporter("nats://127.0.0.1:1", "c", "7", max_pending=1)
    reporter.report(3)
    record = reporter._queue.get_nowait()
    assert record.key == reporter.key and keys_in(err.getvalue().splitlines()) == [reporter.key]
    reporter.close(0.1)
