"""The detector's cache of decoded progress states: bounded, the jobs written longest ago out, and a snapshot
of what was held is what a caller gets, whatever happens to the cache meanwhile."""

from relaunch.detector.adapters.statecache import StateCache


class Value:
    __slots__ = ("name", "stored_as")

    def __init__(self, name) -> None:
        self.name, self.stored_as = name, None

    def __eq__(self, other) -> bool:
        return isinstance(other, Value) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_held_is_a_snapshot_by_token():
    cache: StateCache[Value] = StateCache(10)
    cache.put("1", "w.1", Value("state one"))
    cache.put("2", "w.2", Value("state two"))
    held = cache.held(["1", "3"])
    assert held == {"1": ("w.1", Value("state one"))}
    cache.drop("1")
    assert held["1"] == ("w.1", Value("state one")), "what was handed out stays in the caller's hands"
    assert cache.held(["1"]) == {}


def test_the_least_recently_written_job_goes_first():
    cache: StateCache[Value] = StateCache(2)
    cache.put("1", "a", Value(1))
    cache.put("2", "b", Value(2))
    cache.put("1", "c", Value(10))  # job 1 written again: job 2 is now the oldest
    cache.put("3", "d", Value(3))
    assert cache.held(["1", "2", "3"]) == {"1": ("c", Value(10)), "3": ("d", Value(3))}
    assert len(cache) == 2


def test_a_cache_of_no_jobs_holds_nothing():
    cache: StateCache[Value] = StateCache(0)
    cache.put("1", "a", Value(1))
    assert cache.held(["1"]) == {} and len(cache) == 0


def test_past_its_bound_the_jobs_written_longest_ago_go_an_eighth_at_a_time():
    cache: StateCache[Value] = StateCache(16)
    for i in range(16):
        cache.put(str(i), f"w.{i}", Value(i))
    cache.put("0", "w.16", Value(0))  # job 0 written again: job 1 is now the oldest
    cache.put("16", "w.17", Value(16))
    assert len(cache) == 14  # 17 held: the three written longest ago go (17 - 16 + 16 // 8)
    assert set(cache.held([str(i) for i in range(17)])) == {"0", *map(str, range(4, 17))}


def test_a_value_carries_the_token_of_its_last_write():
    cache: StateCache[Value] = StateCache(4)
    value = Value("state")
    cache.put("1", "w.1", value)
    held = cache.held(["1"])
    cache.put("1", "w.2", value)
    assert held["1"][0] == "w.1" and cache.held(["1"])["1"] == ("w.2", value) and value.stored_as == "w.2"
