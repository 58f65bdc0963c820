"""The detector's Redis script for progress histories against real Redis: the same buckets as the
pure reference (relaunch.common.progress_history.add), bounded, compacted, expiring."""

from __future__ import annotations

import random

import pytest

from relaunch.common import progress_history as ph
from relaunch.detector.adapters.progress_store import ProgressStore

pytestmark = pytest.mark.integration


async def test_the_redis_script_keeps_what_the_reference_keeps(test_stack, unique):
    store = ProgressStore(test_stack["RELAUNCH_REDIS_URL"], max_buckets=16)
    rng = random.Random(7)
    points = [(1.7e9 + i * 3.3, i, round(rng.uniform(90, 110), 3), round(rng.uniform(0.9, 1.1), 3)) for i in range(200)]
    try:
        for start in range(0, len(points), 37):  # several batches, as the detector writes them
            await store.add(f"c{unique}", {"9": points[start:start + 37]})
        got, width = await store.read(f"c{unique}", "9")
        want, want_width = ph.add({}, ph.BASE_WIDTH_S, points, max_buckets=16)
        assert width == want_width and len(got) <= 16
        assert [(b.start, b.n, b.step_min, b.step_max) for b in got] == \
            [(b.start, b.n, b.step_min, b.step_max) for b in sorted(want.values(), key=lambda b: b.start)]
        assert sum(b.n for b in got) == 200
        assert all(abs(g.throughput - w.throughput) < 1e-3 for g, w in zip(got, sorted(want.values(), key=lambda b: b.start)))
        ttl = await store.r.ttl(ph.key(f"c{unique}", "9"))
        assert 0 < ttl <= ph.TTL_S
    finally:
        await store.r.delete(ph.key(f"c{unique}", "9"))
        await store.close()
