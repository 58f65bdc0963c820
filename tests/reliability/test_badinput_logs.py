"""Hostile log files through the detector's real log follower (Redis offsets, JetStream batches) and its
scanner: binary junk, a 10 MB line, invalid UTF-8, NULs and control characters cost bounded time per
line and never stop the follower; the crash written after them is still found."""

from __future__ import annotations

import datetime as dt
import os
import random
import time

import pytest

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.bodies import MAX_BODY_BYTES
from relaunch.common.schemas import LogBatch
from relaunch.detector.adapters.hotstate import HotState
from relaunch.detector.adapters.logfiles import MAX_LINE_BYTES
from relaunch.detector.domain.detection import crash_from_log
from relaunch.common.diagnosis.signatures import load_catalogue
from relaunch.detector.adapters.follower import Follower
from relaunch.detector.settings import DetectorSettings

pytestmark = pytest.mark.reliability

CRASH = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def hostile_log(path, seed: int = 7) -> int:
    """Write the file; returns its size."""
    rng = random.Random(seed)
    with open(path, "wb") as fh:
        fh.write(b"step 1 loss 2.3\n")
        fh.write(bytes(rng.randrange(256) for _ in range(3 << 20)) + b"\n")  # 3 MiB of binary junk
        fh.write(b"x" * 10_000_000 + b"\n")  # one 10 MB line
        fh.write(b"bad utf-8 \xff\xfe\xc3\x28 \xed\xa0\x80 end\n" * 1000)
        fh.write((b"\x01\x02\x1b[31m\x00" * 2000 + b"\n") * 100)  # colour codes, NULs
        fh.write((b"\x01" * 8000 + b"\n") * 300)  # control characters only: 6 bytes each as JSON
        fh.write(b"\r" * 100_000 + b"progress bar\r" * 1000 + b"\n")
        fh.write(CRASH + b"\n")
    return os.path.getsize(path)


async def test_the_follower_and_scanner_survive_hostile_logs_and_still_find_the_crash(test_stack, unique, tmp_path):
    path = tmp_path / "job.out"
    size = hostile_log(path)
    cluster, job = f"c{unique}", "4711"
    bus = await Bus.connect(test_stack["RELAUNCH_NATS_URL"], f"t{unique}")
    state = HotState(test_stack["RELAUNCH_REDIS_URL"])
    follower = Follower(bus, state, cluster, 0.1, DetectorSettings().batch_bytes, log_roots=("/",))
    catalogue = load_catalogue([])
    try:
        await state.track(cluster, job, {"stdout": str(path), "attempt": "0", "nodes": "node1",
                                            "uid": str(os.geteuid())})
        sub = await bus.js.subscribe(subjects.signal_log(cluster, job), stream=subjects.SIGNALS.name,
                                     ordered_consumer=True)
        t0 = time.monotonic()
        await follower.read_job(job)  # everything written so far, in bounded reads
        follow_s = time.monotonic() - t0
        info = await state.job(cluster, job)
        assert int(info[f"off:{path}"]) == size, "the follower read to the end of the file"

        crash_from_log(LogBatch(cluster=cluster, job_id=job, attempt=0, path="/w", offset=0, lines=["warm"],
                                read_at=dt.datetime.now(dt.UTC)), catalogue, [], dt.datetime.now(dt.UTC))
        batches, lines, scan_s, worst_batch_s, found = [], 0, 0.0, 0.0, None
        while True:
            try:
                msg = await sub.next_msg(timeout=2)
            except Exception:  # noqa: BLE001 - nats' TimeoutError: no more batches
                break
            assert len(msg.data) <= MAX_BODY_BYTES, "every batch fits what a consumer accepts"
            batch = LogBatch.model_validate_json(msg.data)
            batches.append(batch)
            lines += len(batch.lines)
            assert all(len(line.encode()) <= 4 * MAX_LINE_BYTES for line in batch.lines)
            t = time.monotonic()
            result = crash_from_log(batch, catalogue, ["node1"], batch.read_at)
            took = time.monotonic() - t
            scan_s, worst_batch_s = scan_s + took, max(worst_batch_s, took)
            if result is not None:
                found = result[0]
        assert batches
        assert found is not None and "out of memory" in found.summary.lower() + found.category.lower(), found
        # Bounded: ~17 MB of hostile text read and published in seconds; lines scanned in well under a
        # millisecond each on average, no batch (at most 256 KiB) taking more than a second.
        assert follow_s < 30, follow_s
        assert scan_s / lines < 0.002 and worst_batch_s < 1.0, (scan_s / lines, worst_batch_s)
        print(f"followed {size / 1e6:.1f} MB in {follow_s:.2f} s as {len(batches)} batches / {lines} lines; "
              f"scan {scan_s / lines * 1e6:.0f} us per line on average, slowest batch {worst_batch_s * 1e3:.0f} ms")
    finally:
        await state.untrack(cluster, job)
        await state.close()
        await bus.close()

