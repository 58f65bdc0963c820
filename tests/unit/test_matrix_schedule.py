"""`make test`'s scheduler (scripts/test_matrix.py): at most TEST_JOBS tiers at once, and the tiers kept apart
(APART: the CPU-bound frameworks tier and the timed hosts tier, issue 38) never side by side."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _matrix():
    spec = importlib.util.spec_from_file_location("relaunch_test_matrix_script", REPO / "scripts" / "test_matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_tiers_kept_apart_never_overlap_and_the_slots_stay_full():
    matrix = _matrix()
    # the tiers make test runs (built by hand: tiers() clears the results of a run in progress)
    todo = matrix.ordered([matrix.Tier(n, []) for n in ("slurm-22.05", "slurm-24.11", "slurm-26.05", "hosts",
                                                        "frameworks", "compose-demo", "once")])
    names = [t.name for t in todo]
    assert names[0] == "frameworks", names  # the longest, and the hosts tier waits for it
    assert dict((t.name, t.apart) for t in todo)["hosts"] == ("frameworks",)
    assert dict((t.name, t.apart) for t in todo)["frameworks"] == ("hosts",)
    lock, spans, now = threading.Lock(), {}, set()
    peak = [0]
    length = {"frameworks": 0.3, "hosts": 0.1}

    def start(tier):
        with lock:
            now.add(tier.name)
            peak[0] = max(peak[0], len(now))
            spans[tier.name] = [time.monotonic(), None]
        time.sleep(length.get(tier.name, 0.05))
        with lock:
            now.discard(tier.name)
            spans[tier.name][1] = time.monotonic()
        tier.rc = 0
        return tier

    ended = matrix.run_all(todo, 3, start)
    assert sorted(t.name for t in ended) == sorted(names)
    assert peak[0] == 3
    (f0, f1), (h0, h1) = spans["frameworks"], spans["hosts"]
    assert h0 >= f1 or f0 >= h1, spans


def test_one_at_a_time_runs_in_order():
    matrix = _matrix()
    todo = matrix.ordered([matrix.Tier(n, []) for n in ("once", "slurm-22.05", "hosts", "frameworks")])
    order = []
    matrix.run_all(todo, 1, lambda t: order.append(t.name) or t)
    assert order == [t.name for t in todo]
