"""When a followed line was written (issue 38, item 3; docs/reliability.md, "Faults between hosts"): a follower
slowed down by a busy host stamps a batch with when its lines were written at the latest (the file's mtime,
bounded by the follower's own previous look), never with a time before that look, never after the read."""

from __future__ import annotations

import os
import time

from relaunch.detector.adapters.follower import Follower
from relaunch.detector.adapters.logfiles import MAX_BACKDATE_S, Access, read_new_lines, written_by

ANY = Access(os.geteuid(), os.getegid(), ("/",))


def test_the_mtime_counts_only_between_the_last_look_and_the_read():
    assert written_by(100.0, 97.5, 96.0) == 97.5  # read 2.5 s late: the line is as old as the file says
    assert written_by(100.0, 90.0, 96.0) == 96.0  # a file server's clock behind: never before the last look
    assert written_by(100.0, 103.0, 96.0) == 100.0  # a clock ahead: never after the read
    assert written_by(100.0, 97.5, None) == 100.0  # no look before (a first read): the read's time
    assert written_by(100.0, None, 96.0) == 100.0
    assert written_by(100.0, 90.0, 100.0 - MAX_BACKDATE_S - 0.1) == 100.0  # a look too long ago: the read's time
    assert written_by(100.0, 97.5, 101.0) == 100.0  # a look "after" the read (the clock stepped back)


def test_a_read_goes_no_further_than_its_fstat_saw_and_says_its_mtime(tmp_path):
    path = tmp_path / "job.out"
    path.write_bytes(b"one\ntwo\n")
    os.utime(path, (1_000_000.0, 1_000_000.0))
    chunk = read_new_lines(str(path), 0, ANY)
    assert chunk.lines == ["one", "two"] and chunk.mtime == 1_000_000.0
    assert read_new_lines(str(path), chunk.next_offset, ANY).mtime is None  # nothing new: no time to say


class _State:
    def __init__(self, path: str) -> None:
        self.info = {"attempt": "0", "stdout": path, "uid": str(os.geteuid()), "gid": str(os.getegid())}

    async def followed_version(self, cluster):
        return "1"

    async def followed(self, cluster):
        return ["7"]

    async def paths_many(self, cluster, jobs):
        return {"7": (self.info["stdout"],)}

    async def job(self, cluster, job_id):
        return self.info

    async def set_offset(self, cluster, job_id, path, offset):
        self.info[f"off:{path}"] = str(offset)


class _Bus:
    def __init__(self) -> None:
        self.batches = []

    async def publish(self, subject, batch, msg_id=None):
        self.batches.append(batch)


async def test_a_late_read_stamps_the_batch_when_its_line_was_written(tmp_path):
    path = tmp_path / "job.out"
    path.write_text("step 1\n")
    bus = _Bus()
    follower = Follower(bus, _State(str(path)), "c", 0.1, batch_bytes=65536, log_roots=("/",))
    before = time.time()
    await follower.pass_once(everything=True, now=0.0)
    assert bus.batches[0].read_at.timestamp() >= before  # a first read: nothing to bound it by
    await follower.pass_once(everything=True, now=0.1)  # nothing new: the follower looked at it now
    looked = time.time()
    with path.open("a") as fh:
        fh.write("step 2\n")
    os.utime(path, (looked + 0.05, looked + 0.05))
    time.sleep(0.4)  # the follower comes back late (a busy host)
    await follower.pass_once(everything=True, now=0.2)
    assert bus.batches[-1].lines == ["step 2"]
    assert abs(bus.batches[-1].read_at.timestamp() - (looked + 0.05)) < 0.01, "stamped with the file's mtime"
    # A file server's clock far behind: the line is never older than the follower's last look.
    with path.open("a") as fh:
        fh.write("step 3\n")
    os.utime(path, (looked - 100, looked - 100))
    await follower.pass_once(everything=True, now=0.3)
    assert bus.batches[-1].lines == ["step 3"] and bus.batches[-1].read_at.timestamp() >= looked
