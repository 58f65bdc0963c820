"""Progress reports bound to their job (relaunch.common.progress_keys, docs/security.md): the keys a job's
log printed are recorded as its lines are read, and a report is handed to the tracker only when its key is
one of them. The others are refused and counted: a report with no key at all is dead-lettered at once
(PermanentError, with the reason); one whose key its job's log has not shown yet is looked at again a few
times (the reporter prints its key before its first report, but the follower may read that line a moment
after the report arrives) and dead-lettered after the consumer's max_deliver."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.outcomes import Delivery
from relaunch.common.progress_keys import keys_in
from relaunch.common.schemas import LogBatch, ProgressReported

from .adapters.progress_keys import ProgressKeys
from .metrics import PROGRESS_REFUSED

Items = list[tuple[ProgressReported, Delivery]]

NO_KEY = ("progress report carries no key: relaunch accepts a job's progress only from a reporter whose key "
          "it read in the job's own log (relaunch.client prints it; docs/security.md)")
UNKNOWN_KEY = "progress report's key has not been printed in the job's log (a report for another job?)"


class ProgressBinding:
    def __init__(self, keys: ProgressKeys, cluster: str, required: bool = True) -> None:
        self.keys, self.cluster, self.required = keys, cluster, required

    async def on_log(self, batch: LogBatch) -> None:
        """Record the keys a batch of the job's own lines printed."""
        found = keys_in(batch.lines)
        if found:
            await self.keys.add(batch.cluster, batch.job_id, found)

    def wrap(self, handle: Callable[[Items], Awaitable[list[Exception | None]]],
             ) -> Callable[[Items], Awaitable[list[Exception | None]]]:
        """`handle` (a progress batch handler) given only the reports bound to their job."""
        if not self.required:
            return handle

        async def bound(items: Items) -> list[Exception | None]:
            results = await self.refusals(items)
            kept = [i for i, r in enumerate(results) if r is None]
            if kept:
                for i, r in zip(kept, await handle([items[i] for i in kept])):
                    results[i] = r
            return results
        return bound

    async def refusals(self, items: Items) -> list[Exception | None]:
        """Per report: None when bound to its job, else the error that refuses it. Keys this process has
        seen already cost a set lookup; the others one Redis round trip for the whole batch."""
        results: list[Exception | None] = [None] * len(items)
        cached = self.keys.cached
        unsure: list[int] = []
        for i, (msg, _) in enumerate(items):
            key = msg.key
            if not key:
                PROGRESS_REFUSED.labels("no key").inc()
                results[i] = PermanentError(NO_KEY)
            elif key not in cached.get((msg.cluster, msg.job_id), ()):
                unsure.append(i)
        if not unsure:
            return results
        by_cluster: dict[str, dict[str, set[str]]] = {}
        for i in unsure:
            msg = items[i][0]
            by_cluster.setdefault(msg.cluster, {}).setdefault(msg.job_id, set()).add(msg.key)
        known: dict[tuple[str, str], set[str]] = {}
        for cluster, jobs in by_cluster.items():
            for job_id, hits in (await self.keys.known(cluster, jobs)).items():
                known[(cluster, job_id)] = hits
        for i in unsure:
            msg = items[i][0]
            if msg.key not in known.get((msg.cluster, msg.job_id), ()):
                PROGRESS_REFUSED.labels("unknown key").inc()
                results[i] = TemporaryError(UNKNOWN_KEY, delay=1.0)
        return results
