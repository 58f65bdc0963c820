"""Bus wiring of hang and straggler detection: progress from log lines and from relaunch.client,
per-attempt state in Redis, and a sweeper over the hang deadlines that any replica may run.

Invariants:
- state belongs to one attempt: a new one starts fresh, warm-up and all (but the job's pauses: carrying);
- hang watching is armed only once the job has shown recognisable progress (in this attempt or an
  earlier one): a job that never prints progress cannot be judged silent;
- one anomaly per attempt and kind (`<cluster>.<job>.<attempt>.<kind>`), whatever replica sees it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable


from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.errors import TemporaryError
from relaunch.common.lanes import KeyedLanes
from relaunch.common.periodic import every, warn_on
from relaunch.common.schemas import AnomalyDetected, LogBatch, ProgressReported

from .gate import CrashFirst
from .adapters.hotstate import HELD, HotState, lines_length, parse_nodes
from .anomalies import AnomalyPublisher
from .adapters.statecache import StateCache
from .domain import checkpoints, hangs, lost_nodes, stragglers
from .domain.clock import seconds
from .domain.detection import anomaly_id
from .domain.track import ProgressTrack, from_record, report_delta
from .domain.progress import CheckpointMark, Health, OverflowMark, ProgressPoint
from .checkpoint_facts import FactPublisher
from relaunch.common.progress import divergence

log = logging.getLogger(__name__)

LOOKED_MAX = 4096
"""Jobs whose put-off hang deadline a replica remembers (ProgressTracker._looked)."""
LINES_MAX = 1024
"""Bytes of report lines kept after a stored state before the whole state is written again (about 30
reports): they bound what a replica that does not hold the state replays (docs/architecture.md, "Scale")."""


class ProgressTracker:
    def __init__(self, bus: Bus, state: HotState, cluster: str, hang_policy: hangs.HangPolicy,
                 straggler_policy: stragglers.StragglerPolicy, sweep_s: float = 1.0,
                 handled_until: Callable[[float], Awaitable[float]] | None = None,
                 cache_jobs: int = 20_000, anomalies: AnomalyPublisher | None = None,
                 last_look: Callable[[str], Awaitable[bool]] | None = None) -> None:
        self.bus, self.state, self.cluster = bus, state, cluster
        self.last_look = last_look
        """job -> whether its log files held lines not read yet (Follower.read_job, which publishes them):
        asked before a hang is declared, since the follower looks at a silent file only every few seconds."""
        self._looked: dict[str, float] = {}
        """job -> the hang deadline a last look put off: once for a deadline, so that a hung job that keeps
        printing lines without progress is still declared (bounded: cleared past LOOKED_MAX jobs)."""
        self.anomalies = anomalies or AnomalyPublisher(bus, state)
        """How hangs and stragglers are published (the crash path's own publisher, where main shares one)."""
        self.hang_policy, self.straggler_policy, self.sweep_s = hang_policy, straggler_policy, sweep_s
        self.gate = CrashFirst()
        # now (epoch s) -> the time up to which every progress signal has been read (ingest.handled_until);
        # None: assume no backlog (tests that feed the tracker directly).
        self.handled_until = handled_until
        # job -> the track this replica last saved (with the token of that write, see statecache): the next
        # report advances it in place, with no decoding (domain/track.py: its numbers lie in arrays, about
        # 2 KB a job, where frozen states of float objects took three times that).
        self.cache: StateCache[ProgressTrack] = StateCache(cache_jobs)
        self._policies: dict[str, tuple[hangs.HangPolicy, stragglers.StragglerPolicy]] = {}
        self._lanes = KeyedLanes()
        """One lane per job: a batch waits for the earlier batches of its jobs (see on_progress_batch)."""
        self.facts = FactPublisher(bus)
        """Checkpoint saves, each attempt's first step and catching up: into the ledger (docs/goodput.md)."""

    # -- inputs ---------------------------------------------------------------------------------
    async def on_batch(self, batch: LogBatch) -> None:
        marks, loads = checkpoints.read_lines(batch.lines)
        if marks or loads:
            await self._observe(batch.job_id, batch.attempt, marks, batch.read_at, loads)

    async def on_progress(self, msg: ProgressReported, delivery: Delivery) -> None:
        info = await self.state.job(msg.cluster, msg.job_id)
        if not info.get("attempt"):
            raise TemporaryError("job not observed yet", delay=1.0)
        await self._observe(msg.job_id, int(info["attempt"]), [_client_point(msg)], msg.at)

    async def on_progress_batch(self, items: list[tuple[ProgressReported, Delivery]]) -> list[Exception | None]:
        """on_progress for a whole fetch (ingest.consume_batch): one Redis round trip reads every job's
        state and one transaction writes it back, so the detector keeps up with thousands of jobs
        reporting every second. A job's messages are applied in stream order, as one by one."""
        await self.gate.wait()
        results: list[Exception | None] = [None] * len(items)
        mine: dict[str, list[int]] = {}
        for i, (msg, _) in enumerate(items):
            if msg.cluster == self.cluster:
                mine.setdefault(msg.job_id, []).append(i)
        # Several batches may be in here at once (consume_batch's concurrency): a job's batch waits for
        # its earlier batch to be saved, so each job's reports still apply one after another.
        async with self._lanes.turn(*mine):
            for i, (msg, delivery) in enumerate(items):
                if msg.cluster != self.cluster:  # not this detector's cluster: the one-by-one path, as ever
                    try:
                        await self.on_progress(msg, delivery)
                    except Exception as exc:  # noqa: BLE001 - mapped by the ingest engine, per message
                        results[i] = exc
            await self._progress_batch(items, mine, results)
        return results

    async def _progress_batch(self, items: list[tuple[ProgressReported, Delivery]], mine: dict[str, list[int]],
                              results: list[Exception | None]) -> None:
        held = self.cache.held(mine)
        loaded = await self.state.progress_many(self.cluster, list(mine), {j: t for j, (t, _) in held.items()})
        saves, tracks, found, divergences, facts = [], [], [], [], []
        for job_id, indexes in mine.items():
            info, _token, data = loaded[job_id]
            if not info.get("attempt"):
                for i in indexes:
                    results[i] = TemporaryError("job not observed yet", delay=1.0)
                continue
            attempt = int(info["attempt"])
            hang_policy, policy = self._policies_of(info)
            hang_keep, samples_kept, window_points = hang_policy.window, policy.samples_kept, policy.window_points
            # The reports are stored as lines after the state where this replica holds the very state
            # stored (`lines`, appended by save_progress_many): 35 bytes a report instead of the whole
            # state (1.6 KB), whose writing had cost the detector a tenth of its CPU and Redis a third of
            # a core at 10,000 reports a second. Any other report (a new attempt, loss figures, a skipped
            # step) has the whole state written.
            after = lines = None
            if data is HELD:  # the very state this replica saved last, still in Redis: advanced in place
                after, live = held[job_id]
                lines = []
                # out of the cache until it is saved again: a failed save must not leave an advanced
                # state behind for the redelivered reports to be applied to a second time
                self.cache.drop(job_id)
            else:
                live = _track_of(data, hang_keep, samples_kept)
            if live is not None and live.attempt > attempt:
                continue  # an older attempt's reports arriving late
            high_before = live.high_step if live is not None and live.attempt == attempt else None
            diverged = verdict = None
            for i in indexes:
                msg, delivery = items[i]
                at = msg.at.timestamp()
                if live is None or live.attempt != attempt:  # a new attempt starts fresh
                    live = ProgressTrack(attempt, round(at, 3), hang_keep, samples_kept).carrying(live)
                    lines = None
                before = live.total
                if msg.skipped or msg.loss is not None or msg.grad_norm is not None or msg.loss_scale is not None:
                    point = _client_point(msg)
                    live.observe_point(point, at, hang_keep, samples_kept)
                    div = live.divergence = divergence.observe(live.divergence, point)
                    lines = None
                else:  # most reports: observe_point and observe of _client_point(msg), without the point
                    live.observe_report(msg.step, msg.throughput, msg.step_time_s, msg.rank, at, hang_keep,
                                        samples_kept)
                    div = live.advance_divergence(msg.step)  # None: steady, no verdict to look for
                    if lines is not None:
                        lines.append(report_delta(msg.step, msg.throughput, msg.step_time_s, msg.rank, at))
                if div is not None and diverged is None and (d := divergence.verdict(div)) is not None:
                    diverged = (d, msg.at)
                # A verdict reads complete windows only: look when this report closed one (or when it is a
                # redelivery, whose first try may have failed after the state was saved).
                if verdict is None and (live.total // window_points != before // window_points
                                        or delivery.num_delivered > 1) \
                        and (v := stragglers.verdict(live.straggler_state(), policy)) is not None:
                    verdict = (v, msg.at)
            if live is None:
                continue
            facts.extend(checkpoints.from_reports(
                self.cluster, job_id, attempt, [(items[i][0].step, items[i][0].at, bool(items[i][0].checkpoint_saved))
                                                for i in indexes],
                high_before, checkpoints.catch_up_target(info.get(checkpoints.CATCH_UP_FIELD), attempt)))
            deadline, first = live.deadline(hang_policy), not info.get("progress_seen")
            if lines and (added := b"".join(lines)) and lines_length(after) + len(added) <= LINES_MAX:
                saves.append((job_id, added, deadline, first, after))
            else:
                saves.append((job_id, live.encode(), deadline, first, None))
            tracks.append(live)
            if verdict is not None:
                found.append((job_id, attempt, verdict, indexes))
            if diverged is not None:
                divergences.append((job_id, attempt, diverged, indexes))
        # Before the states are saved: a failed publish has the batch redelivered and its facts found again.
        await self.facts.publish(facts)
        written = await self.state.save_progress_many(self.cluster, saves)
        refused = [k for k, token in enumerate(written) if token is None]
        if refused:  # another replica wrote one of these states meanwhile: the whole state, as before lines
            again = [(saves[k][0], tracks[k].encode(), *saves[k][2:4], None) for k in refused]
            for k, token in zip(refused, await self.state.save_progress_many(self.cluster, again)):
                written[k] = token
        for (job_id, *_), live, token in zip(saves, tracks, written):
            self.cache.put(job_id, token, live)
        for job_id, attempt, (verdict, at), indexes in found:
            try:
                await self._straggler(job_id, attempt, verdict, await self.state.job(self.cluster, job_id), at)
            except Exception as exc:  # noqa: BLE001 - its messages are retried; the state is saved already
                for i in indexes:
                    results[i] = exc
        for job_id, attempt, (found_div, at), indexes in divergences:
            try:
                await self._divergence(job_id, attempt, found_div, await self.state.job(self.cluster, job_id), at)
            except Exception as exc:  # noqa: BLE001 - as above
                for i in indexes:
                    results[i] = exc

    async def on_attempt(self, job_id: str, attempt: int, running: bool, finished: bool) -> None:
        """Called on every JobObserved: a new attempt starts fresh; a finished one stops being watched.
        (The detector's handler forgets a finished attempt's state with its write of the job's hash
        instead, in one round trip: HotState.track(..., forget_progress=True).)"""
        if finished:
            await self.state.forget_progress(self.cluster, job_id)
            return
        current = await self.state.progress(self.cluster, job_id)
        if current is not None and current.get("attempt") == attempt:
            return
        info = await self.state.job(self.cluster, job_id)
        if running and info.get("progress_seen"):
            fresh = ProgressTrack(attempt, seconds(utcnow())).carrying(_track_of(current))
            await self.state.save_progress(self.cluster, job_id, fresh.encode(), fresh.deadline(self._hang_policy(info)))
        elif current is not None:
            await self.state.forget_progress(self.cluster, job_id)

    async def _observe(self, job_id: str, attempt: int, marks: list, at: dt.datetime, loads: list = ()) -> None:
        info = await self.state.job(self.cluster, job_id)
        hang_policy, policy = self._policies_of(info)
        live = _track_of(await self.state.progress(self.cluster, job_id), hang_policy.window, policy.samples_kept)
        if live is not None and live.attempt > attempt:
            return  # lines of an older attempt arriving late
        at_s = seconds(at)
        if live is None or live.attempt != attempt:  # a new attempt starts fresh
            live = ProgressTrack(attempt, round(at_s, 3), hang_policy.window, policy.samples_kept).carrying(live)
        high_before = live.high_step
        live.observe(marks, at_s, hang_policy.window, policy.samples_kept)
        await self.facts.publish(checkpoints.from_marks(
            self.cluster, job_id, attempt, marks, at, high_before,
            checkpoints.catch_up_target(info.get(checkpoints.CATCH_UP_FIELD), attempt), loads=loads))
        diverged = None
        for mark in marks:
            if isinstance(mark, CheckpointMark):
                continue
            if isinstance(mark, ProgressPoint) and mark.health is None:  # most lines: see on_progress_batch
                div = live.advance_divergence(mark.step)
            else:
                div = live.divergence = divergence.observe(live.divergence, mark)
            if div is not None:
                diverged = diverged or divergence.verdict(div)
        if not info.get("progress_seen"):
            await self.state.track(self.cluster, job_id, {"progress_seen": "1"})
        await self.state.save_progress(self.cluster, job_id, live.encode(), live.deadline(hang_policy))
        found = stragglers.verdict(live.straggler_state(), policy)
        if found is not None:
            await self._straggler(job_id, attempt, found, info, at)
        if diverged is not None:
            await self._divergence(job_id, attempt, diverged, info, at)

    # -- outputs --------------------------------------------------------------------------------
    async def sweep(self, stop: asyncio.Event) -> None:
        await every(self.sweep_s, self._sweep_now, stop, on_error=warn_on(log, "hang sweep: %s"))

    async def _sweep_now(self) -> None:
        now = utcnow()
        horizon = None
        if self.handled_until is not None:
            horizon = dt.datetime.fromtimestamp(await self.handled_until(now.timestamp()), dt.UTC)
        await self.sweep_once(now, horizon)

    async def sweep_once(self, now: dt.datetime, horizon: dt.datetime | None = None) -> None:
        """Declare the hangs due by `horizon` (default `now`): the time up to which every progress
        signal has been read. A detector that is behind judges silence only as far as it has read,
        so a backlog never turns healthy jobs into hangs."""
        horizon = min(now, horizon) if horizon is not None else now
        if horizon < now - dt.timedelta(seconds=5):
            log.info("hang sweep: progress read up to %.1f s ago; judging silence only up to then",
                     (now - horizon).total_seconds())
        for job_id in await self.state.due_hangs(self.cluster, horizon.timestamp()):
            if not await self.state.claim_hang(self.cluster, job_id):
                continue  # another replica took it
            data = await self.state.progress(self.cluster, job_id)
            if data is None:
                continue
            info = await self.state.job(self.cluster, job_id)
            policy = self._hang_policy(info)
            hang_state = hangs.HangState.from_dict(data["hang"])
            found = hangs.verdict(hang_state, policy, horizon)
            if found is None:  # progress moved the deadline meanwhile: arm it again
                await self.state.save_progress(self.cluster, job_id, data, hangs.deadline(hang_state, policy))
                continue
            attempt = int(data["attempt"])
            if await self.state.has_anomaly(self.cluster, job_id, attempt):
                continue
            deadline = hangs.deadline(hang_state, policy)
            if self._looked.get(job_id) != deadline and await self._unread_lines(job_id):
                if len(self._looked) >= LOOKED_MAX:
                    self._looked.clear()
                self._looked[job_id] = deadline  # judged again once they are handled
                await self.state.save_progress(self.cluster, job_id, data, deadline)
                continue
            self._looked.pop(job_id, None)
            due = dt.datetime.fromtimestamp(deadline, dt.UTC)
            if lost := await self._lost_at_hang(job_id, attempt, info, hang_state, horizon):
                await self._publish(due, lost_nodes.anomaly(
                    self.cluster, job_id, attempt, lost[0], lost[1], now, hang_state.high_step,
                    f"{lost[0].reason}; {found.reason}"))
                continue
            await self._publish(due, AnomalyDetected(
                anomaly_id=anomaly_id(self.cluster, job_id, attempt, "hang"), cluster=self.cluster, job_id=job_id,
                attempt=attempt, kind="hang", source="progress", signature_id="hang_no_progress", category="hang",
                fault_domain="unknown", action="restart", summary=found.reason[:2000],
                nodes=parse_nodes(info.get("nodes")), detected_at=now, last_step=hang_state.high_step,
                advanced=bool(hang_state.intervals),  # a step interval learnt: it stepped forward since it began
            ))

    async def _lost_at_hang(self, job_id: str, attempt: int, info: dict, hang_state: hangs.HangState,
                            horizon: dt.datetime) -> tuple[lost_nodes.Verdict, dict] | None:
        """A node that fell silent just before the hung job's last step (lost_nodes.at_hang), with the heartbeats."""
        heard = {n: lost_nodes.Heard(at, interval) for n, (at, interval) in
                 (await self.state.heard_all(self.cluster)).items()}
        progress = lost_nodes.Progress(hang_state.progress_at, hang_state.high_step)
        found = lost_nodes.at_hang(parse_nodes(info.get("nodes")), heard, progress, horizon.timestamp())
        return (found, heard) if found else None

    async def _unread_lines(self, job_id: str) -> bool:
        """A last look at the job's log files before its hang is declared. The lines found are published
        (LogBatch) and, being unhandled, hold the next sweep's horizon before them; a look that fails
        finds nothing (the hang is declared, as without it)."""
        if self.last_look is None:
            return False
        try:
            return await self.last_look(job_id)
        except Exception as exc:  # (a file or Redis error: the verdict stands on what was read)
            log.warning("hang sweep: job %s: last look at its log failed: %s", job_id, exc)
            return False

    async def _straggler(self, job_id: str, attempt: int, found: stragglers.Straggler, info: dict,
                         at: dt.datetime) -> None:
        if await self.state.has_anomaly(self.cluster, job_id, attempt, kinds=("straggler",)):
            return
        await self._publish(at, AnomalyDetected(
            anomaly_id=anomaly_id(self.cluster, job_id, attempt, "straggler"), cluster=self.cluster, job_id=job_id,
            attempt=attempt, kind="straggler", source="progress", signature_id="straggler_throughput",
            category="straggler", fault_domain="unknown",
            action="restart_excluding" if found.node else "restart", summary=found.reason[:2000],
            nodes=[found.node] if found.node else [], detected_at=at,
            last_step=await self.last_step(job_id, attempt),
        ))

    async def _divergence(self, job_id: str, attempt: int, found: divergence.Divergence, info: dict,
                          at: dt.datetime) -> None:
        """Training goes on but wrongly: one anomaly per attempt; the decider stops and cancels the job
        by default (docs/policy.md, "Divergence")."""
        if await self.state.has_anomaly(self.cluster, job_id, attempt, kinds=("divergence",)):
            return
        await self._publish(at, AnomalyDetected(
            anomaly_id=anomaly_id(self.cluster, job_id, attempt, "divergence"), cluster=self.cluster, job_id=job_id,
            attempt=attempt, kind="divergence", source="progress", signature_id=found.signature_id,
            category="divergence", fault_domain="application", action="stop", summary=found.reason[:2000],
            nodes=parse_nodes(info.get("nodes")), detected_at=at,
            last_step=await self.last_step(job_id, attempt),
        ))

    async def last_step(self, job_id: str, attempt: int) -> int | None:
        """The highest step the attempt reached, as far as this detector saw (for the decider's
        no-progress rules)."""
        return high_step_in(await self.state.progress(self.cluster, job_id), attempt)

    async def progress_of(self, job_id: str, attempt: int) -> lost_nodes.Progress:
        """The attempt's last step, its time and recent step intervals (for lost-node detection)."""
        data = await self.state.progress(self.cluster, job_id)
        if data is None or data.get("attempt") != attempt:
            return lost_nodes.Progress(None)
        hang = hangs.HangState.from_dict(data["hang"])
        return lost_nodes.Progress(hang.progress_at, hang.high_step, tuple(hang.intervals[-20:]),
                                   saving=hang.save_started_at is not None)

    async def _publish(self, evidence_at: dt.datetime, anomaly: AnomalyDetected) -> None:
        await self.anomalies.publish(anomaly, evidence_at)

    # -- per-job policies -----------------------------------------------------------------------
    def _policies_of(self, info: dict) -> tuple[hangs.HangPolicy, stragglers.StragglerPolicy]:
        """_hang_policy and _straggler_policy, remembered by the job's options text (most jobs share a few)."""
        raw = info.get("options") or ""
        policies = self._policies.get(raw)
        if policies is None:
            if len(self._policies) >= 4096:
                self._policies.clear()
            policies = self._policies[raw] = (self._hang_policy(info), self._straggler_policy(info))
        return policies

    def _hang_policy(self, info: dict) -> hangs.HangPolicy:
        options = {k: v for k, v in _options(info).items() if v}  # hang_timeout=0 means "calibrated"
        try:
            return hangs.policy_with_options(self.hang_policy, options)
        except ValueError:
            return self.hang_policy

    def _straggler_policy(self, info: dict) -> stragglers.StragglerPolicy:
        try:
            return stragglers.policy_with_options(self.straggler_policy, _options(info))
        except ValueError:
            return self.straggler_policy


def _options(info: dict) -> dict:
    try:
        return json.loads(info.get("options") or "{}")
    except ValueError:
        return {}


def _track_of(data: dict | None, hang_keep: int = 0, straggler_keep: int = 0) -> ProgressTrack | None:
    """A stored record as a track; None for none, or for one that cannot be read (tracking starts afresh,
    as for a new attempt)."""
    if data is None:
        return None
    try:
        return from_record(data, hang_keep, straggler_keep)
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("progress state unreadable, tracking starts afresh: %s", exc)
        return None


def _client_point(msg: ProgressReported) -> ProgressPoint | OverflowMark:
    """A report_progress record as the log parser's value (its loss figures included)."""
    if msg.skipped:
        return OverflowMark(msg.loss_scale, msg.rank, "client")
    health = None
    if msg.loss is not None or msg.grad_norm is not None or msg.loss_scale is not None:
        health = Health(loss=msg.loss, grad_norm=msg.grad_norm, loss_scale=msg.loss_scale)
    # ProgressPoint(step=..., preset="client", health=health), made without the frozen dataclass's
    # per-field object.__setattr__ (a third of this function's cost; it runs for every report)
    point = object.__new__(ProgressPoint)
    point.__dict__.update(step=msg.step, throughput=msg.throughput, step_time_s=msg.step_time_s, rank=msg.rank,
                          preset="client", health=health, total=None)
    return point


def high_step_in(data: dict | None, attempt: int) -> int | None:
    """The highest step `attempt` reached in a stored progress state (HotState.progress's), None when
    the state is of another attempt or there is none."""
    if data is None or data.get("attempt") != attempt:
        return None
    return hangs.HangState.high_step_of(data["hang"])
