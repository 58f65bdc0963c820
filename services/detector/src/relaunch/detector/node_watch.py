"""Bus wiring of lost-node detection (domain/lost_nodes.py): every NodeHealth marks its node as heard
(in Redis, so any replica judges alike), and a sweep judges the running jobs on silent nodes.

A lost node is published as a hang of the attempt (source "node", category "node_lost", action
restart_excluding the lost nodes): the job is not progressing, and the decider restarts it without
those nodes (docs/reliability.md, "Faults between hosts"). A probe that fell silent while its jobs
keep going is reported once per silence (log, metric), never acted on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable

from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.periodic import every, warn_on
from relaunch.common.schemas import NodeHealth

from .adapters.hotstate import HotState, parse_nodes
from .anomalies import AnomalyPublisher
from .domain import lost_nodes
from .metrics import PROBE_SILENT
from .tracking import ProgressTracker

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
"""A NodeHealth that does not say its heartbeat period (an older probe): gpu-probe's old default."""


class LostNodeWatch:
    def __init__(self, state: HotState, anomalies: AnomalyPublisher, tracker: ProgressTracker, cluster: str,
                 sweep_s: float = 1.0, read_until: Callable[[float], Awaitable[float]] | None = None) -> None:
        """`read_until(now)`: the time up to which every heartbeat and progress signal has been read
        (ingest.handled_until); silence is judged only up to then, so a detector with a backlog never
        takes heartbeats it has not read for a lost node. None: no backlog (tests)."""
        self.state, self.anomalies, self.tracker = state, anomalies, tracker
        self.cluster, self.sweep_s, self.read_until = cluster, sweep_s, read_until

    async def on_node(self, health: NodeHealth, delivery: Delivery) -> None:
        if health.cluster != self.cluster:
            return
        await self.state.heard(health.cluster, health.node, health.at.timestamp(),
                               health.interval_s or DEFAULT_INTERVAL_S)

    async def sweep(self, stop: asyncio.Event) -> None:
        await every(self.sweep_s, self._sweep_now, stop, on_error=warn_on(log, "lost-node sweep: %s"))

    async def _sweep_now(self) -> None:
        now = utcnow()
        horizon = await self.read_until(now.timestamp()) if self.read_until else now.timestamp()
        await self.sweep_once(now, horizon)

    async def sweep_once(self, now: dt.datetime, horizon: float | None = None) -> None:
        t = min(now.timestamp(), horizon) if horizon is not None else now.timestamp()
        heard = {n: lost_nodes.Heard(at, interval) for n, (at, interval) in
                 (await self.state.heard_all(self.cluster)).items()}
        silent = {n for n, h in heard.items() if lost_nodes.silence(h, t) > 0}
        PROBE_SILENT.set(len(silent))
        if not silent:
            return
        jobs = await self.state.followed(self.cluster)
        for job_id, (nodes, state, attempt) in (await self.state.fields_many(
                self.cluster, jobs, ("nodes", "state", "attempt"))).items():
            members = parse_nodes(nodes)
            if state != "RUNNING" or not attempt or not silent.intersection(members):
                continue
            attempt_n = int(attempt)
            if await self.state.has_anomaly(self.cluster, job_id, attempt_n):
                continue
            found = lost_nodes.verdict(members, heard, await self.tracker.progress_of(job_id, attempt_n), t)
            if found is None:
                continue
            if found.kind == "probe_silent":
                for node in found.silent:
                    if await self.state.first_report(self.cluster, node, heard[node].at):
                        log.warning("job %s: %s", job_id, found.reason)
                continue
            await self._publish(job_id, attempt_n, members, found, heard, now)

    async def _publish(self, job_id: str, attempt: int, members: list[str], found: lost_nodes.Verdict,
                       heard: dict[str, lost_nodes.Heard], now: dt.datetime) -> None:
        anomaly = lost_nodes.anomaly(self.cluster, job_id, attempt, found, heard, now,
                                     await self.tracker.last_step(job_id, attempt))
        # The evidence was complete when the silence passed its threshold.
        due = max(heard[n].at + max(lost_nodes.MISSED * heard[n].interval_s, lost_nodes.MIN_SILENCE_S)
                  for n in found.silent)
        await self.anomalies.publish(anomaly, dt.datetime.fromtimestamp(min(due, now.timestamp()), dt.UTC))
