"""The progress states this detector replica wrote last, as it stored them, so that the next report of
the same job need not read its state from Redis again and decode it with checks (at 10,000 jobs
reporting every second, that was most of the detector's work).

Redis stays the truth: an entry is used only while Redis still holds the very write it came from
(HotState's write tokens), so another replica's write, a lost Redis or a restarted attempt are never
missed. Bounded: past `max_jobs`, the job unseen for longest is dropped (it is read from Redis again).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class StateCache(Generic[V]):
    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max(0, max_jobs)
        self._entries: OrderedDict[str, tuple[str, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def held(self, job_ids) -> dict[str, tuple[str, V]]:
        """job -> (token of the write it came from, state), for the jobs held: a snapshot, so that what a
        caller asks Redis about stays in its hands whatever is evicted meanwhile."""
        entries = self._entries
        return {job_id: entries[job_id] for job_id in job_ids if job_id in entries}

    def put(self, job_id: str, token: str, value: V) -> None:
        if not self.max_jobs:
            return
        self._entries[job_id] = (token, value)
        self._entries.move_to_end(job_id)
        while len(self._entries) > self.max_jobs:
            self._entries.popitem(last=False)

    def drop(self, job_id: str) -> None:
        self._entries.pop(job_id, None)
