"""The progress states this detector replica wrote last, as it stored them, so that the next report of
the same job need not read its state from Redis again and decode it with checks (at 10,000 jobs
reporting every second, that was most of the detector's work).

Redis stays the truth: an entry is used only while Redis still holds the very write it came from
(HotState's write tokens), so another replica's write, a lost Redis or a restarted attempt are never
missed. Bounded: past `max_jobs`, the jobs written longest ago are dropped (read from Redis again).

Memory (docs/architecture.md, "Scale"): a value carries its write's token itself (`stored_as`), and the
entries lie in a plain dict, whose order is the order of the writes (a write moves its job to the end).
An OrderedDict's links and a (token, value) tuple per job were about 220 bytes a job more.
"""

from __future__ import annotations

from itertools import islice
from typing import Generic, Protocol, TypeVar


class Stored(Protocol):
    stored_as: str | None
    """The token of the write this value came from (set by StateCache.put)."""


V = TypeVar("V", bound=Stored)


class StateCache(Generic[V]):
    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max(0, max_jobs)
        self._entries: dict[str, V] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def held(self, job_ids) -> dict[str, tuple[str, V]]:
        """job -> (token of the write it came from, state), for the jobs held: a snapshot, so that what a
        caller asks Redis about stays in its hands whatever is evicted or written meanwhile."""
        entries = self._entries
        return {job_id: (value.stored_as, value) for job_id in job_ids
                if (value := entries.get(job_id)) is not None}

    def put(self, job_id: str, token: str, value: V) -> None:
        if not self.max_jobs:
            return
        value.stored_as = token
        entries = self._entries
        entries.pop(job_id, None)  # (to the end: the order of the writes)
        entries[job_id] = value
        if len(entries) > self.max_jobs:
            # An eighth at a time: a dict finds its first key by walking past the slots of the keys
            # removed before it, so one eviction a write would walk them again for every write.
            for old in list(islice(entries, len(entries) - self.max_jobs + self.max_jobs // 8)):
                del entries[old]

    def drop(self, job_id: str) -> None:
        self._entries.pop(job_id, None)
