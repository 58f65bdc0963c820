"""Records every job's progress into its bounded history (relaunch.common.progress_history), beside
the tracker and apart from it: the tracker keeps only what detection needs (a window, a baseline, a
deadline), this keeps what a person wants to see, in Redis, never in the detector's memory.

Recording is best effort: a failed write is logged and counted, and never fails the batch (the
detection that matters has been done by then; a gap in a picture is not worth a redelivery)."""

from __future__ import annotations

import logging

from prometheus_client import Counter

from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import LogBatch, ProgressReported

from .adapters.progress_store import ProgressStore
from .domain.progress import ProgressPoint, parse_line

log = logging.getLogger(__name__)

RECORDED = Counter("relaunch_detector_progress_history_points_total",
                   "Progress points written to the jobs' bounded histories, by outcome (ok | failed)", ["outcome"])


_OK, _FAILED = RECORDED.labels("ok"), RECORDED.labels("failed")
"""(labelled once: `labels` checks its names on every call, for every batch)"""


class ProgressHistory:
    def __init__(self, store: ProgressStore, cluster: str) -> None:
        self.store, self.cluster = store, cluster

    async def on_log(self, batch: LogBatch) -> None:
        if batch.cluster != self.cluster:
            return
        at = batch.read_at.timestamp()
        found = [(batch.job_id, at, p.step, p.throughput, p.step_time_s)
                 for p in map(parse_line, batch.lines) if isinstance(p, ProgressPoint) and p.step is not None]
        await self._add(found)

    async def on_reports(self, items: list[tuple[ProgressReported, Delivery]]) -> None:
        cluster = self.cluster
        await self._add([(m.job_id, m.at.timestamp(), m.step, m.throughput, m.step_time_s)
                         for m, _ in items if m.cluster == cluster])

    async def _add(self, found: list) -> None:
        if not found:
            return
        try:
            await self.store.add_flat(self.cluster, found)
            _OK.inc(len(found))
        except Exception as exc:  # noqa: BLE001 - best effort, see above
            _FAILED.inc(len(found))
            log.warning("progress history: %d points not recorded: %s", len(found), exc)
