"""The detector's cache of decoded progress states: bounded, least recently used out, and a snapshot
of what was held is what a caller gets, whatever happens to the cache meanwhile."""

from relaunch.detector.adapters.statecache import StateCache


def test_held_is_a_snapshot_by_token():
    cache: StateCache[str] = StateCache(10)
    cache.put("1", "w.1", "state one")
    cache.put("2", "w.2", "state two")
    held = cache.held(["1", "3"])
    assert held == {"1": ("w.1", "state one")}
    cache.drop("1")
    assert held["1"] == ("w.1", "state one"), "what was handed out stays in the caller's hands"
    assert cache.held(["1"]) == {}


def test_the_least_recently_written_job_goes_first():
    cache: StateCache[int] = StateCache(2)
    cache.put("1", "a", 1)
    cache.put("2", "b", 2)
    cache.put("1", "c", 10)  # job 1 written again: job 2 is now the oldest
    cache.put("3", "d", 3)
    assert cache.held(["1", "2", "3"]) == {"1": ("c", 10), "3": ("d", 3)}
    assert len(cache) == 2


def test_a_cache_of_no_jobs_holds_nothing():
    cache: StateCache[int] = StateCache(0)
    cache.put("1", "a", 1)
    assert cache.held(["1"]) == {} and len(cache) == 0
