"""Bus wiring of the detector: the log-batch and job-observation handlers (the log follower is
adapters/follower.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging

from relaunch.common.connection import Bus
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.diagnosis.signatures import Catalogue
from relaunch.common.errors import TemporaryError
from relaunch.common.job_states import ENDED_UNFAILED, FAILED_STATES, FINAL_STATES
from relaunch.common.optin import parse_comment
from relaunch.common.schemas import AnomalyDetected, JobObserved, LogBatch, dump

from .adapters.follower import Follower
from .adapters.hotstate import HotState, nodes_field, parse_nodes
from .adapters.logfiles import Access, readable_size, unreadable_reason
from .domain.detection import (classify_batch, crash_anomaly, crash_from_scheduler, held_field, mapped_held,
                               node_addrs_field, parse_node_addrs, scheduler_state)
from .anomalies import AnomalyPublisher
from .tracking import ProgressTracker, high_step_in

log = logging.getLogger(__name__)


class Detector:
    def __init__(self, bus: Bus, state: HotState, follower: Follower, catalogue: Catalogue,
                 grace_s: float, tracker: ProgressTracker, anomalies: AnomalyPublisher | None = None,
                 history=None) -> None:
        """`anomalies`: the publisher hangs and stragglers go through too (default: the tracker's).
        `history`: a relaunch.detector.history_recorder.ProgressHistory, or None."""
        self.history = history
        self.bus, self.state, self.follower = bus, state, follower
        self.catalogue, self.grace_s, self.tracker = catalogue, grace_s, tracker
        self.anomalies = anomalies or tracker.anomalies
        self.binding = None
        """A binding.ProgressBinding, which records the progress keys the job's lines print (main.py)."""

    async def on_log(self, batch: LogBatch, delivery: Delivery) -> None:
        async with self.tracker.gate.urgent():
            await self._on_log(batch)

    async def on_job(self, obs: JobObserved, delivery: Delivery) -> None:
        async with self.tracker.gate.urgent():
            await self._on_job(obs)

    async def _on_log(self, batch: LogBatch) -> None:
        if self.binding is not None:
            await self.binding.on_log(batch)
        await self.tracker.on_batch(batch)
        if self.history is not None:
            await self.history.on_log(batch)
        # Most batches show no failure: the job's hash (its nodes) is read only for those that do, with
        # whether the attempt has its anomaly already and its last step, in one round trip.
        found = classify_batch(batch, self.catalogue)
        if found is None:
            return
        info, explained, progress = await self.state.crash_context(batch.cluster, batch.job_id, batch.attempt)
        if explained:
            return
        anomaly = crash_anomaly(batch, found, parse_nodes(info.get("nodes")), utcnow(),
                                parse_node_addrs(info.get("addrs")), parse_nodes(info.get("down")))
        if found.cascade:
            await self.state.set_candidate(batch.cluster, batch.job_id, batch.attempt, dump(anomaly).decode())
            return
        if (step := high_step_in(progress, batch.attempt)) is not None:
            anomaly = anomaly.model_copy(update={"last_step": step})
        if found.addresses and not parse_nodes(info.get("nodes")):
            # The lines blame an address, and the observation that names the job's nodes and their NodeAddr
            # has not come yet (a failure in the attempt's first second): held until it does (_on_job).
            if not info.get("unmapped"):
                await self.state.track(batch.cluster, batch.job_id,
                                       {"unmapped": held_field(anomaly, found, batch.read_at)})
            return
        await self.anomalies.publish(anomaly, batch.read_at)

    async def _on_job(self, obs: JobObserved) -> None:
        c, job = obs.cluster, obs.job_id
        failed = scheduler_state(obs) in FAILED_STATES  # (a CANCELLED job that was preempted is one)
        # A failed attempt's anomaly is usually out already (its log said why): asked with the job's hash.
        # A mark is never taken back, so only a "not yet" is asked again once the log was read (below).
        if failed:
            info, explained = await self.state.job_unless_anomaly(c, job, obs.restarts)
        else:
            info, explained = await self.state.job(c, job), False
        # An observation without paths (the actuator found the job in accounting and Slurm kept no
        # path) does not erase the paths an earlier observation gave.
        fields = {"stdout": obs.stdout or info.get("stdout", ""), "stderr": obs.stderr or info.get("stderr", ""),
                  "nodes": nodes_field(obs.nodes), "options": json.dumps(parse_comment(obs.comment).options),
                  "state": obs.state}
        # Whose job it is, for reading its output as that user could (adapters/logfiles.py); an
        # observation that does not say keeps what an earlier one said.
        if obs.user_id is not None:
            fields.update(uid=str(obs.user_id), gid="" if obs.group_id is None else str(obs.group_id),
                          workdir=obs.work_dir)
        # Where each node is (NodeAddr): an address a log line blames is mapped to its node with it
        # (domain/detection.crash_anomaly). An observation that does not say keeps what an earlier said.
        if obs.node_addrs:
            fields["addrs"] = node_addrs_field(obs.node_addrs)
        # The job's nodes Slurm shows down now (a node failure's failed node: crash_anomaly).
        fields["down"] = nodes_field(obs.nodes_down)
        access = Access.of({**info, **fields}, self.follower.log_roots)
        known_attempt = int(info["attempt"]) if info.get("attempt") else None
        if known_attempt is not None and known_attempt > obs.restarts:
            return  # an older observation than what we already follow
        if known_attempt is None:
            fields["attempt"] = str(obs.restarts)
            if obs.restarts > 0:
                # First seen on a later attempt: earlier attempts' lines (append mode) are not ours.
                for path in (obs.stdout, obs.stderr):
                    if path and (size := await asyncio.to_thread(readable_size, path, access)) is not None:
                        fields[f"off:{path}"] = str(size)
        elif known_attempt < obs.restarts:
            await self.follower.read_job(job)  # drain the old attempt's lines under its own number
            fields["attempt"] = str(obs.restarts)
        # A finished attempt stops being watched for hangs and stragglers in the same round trip
        # (ProgressTracker.on_attempt's part for it).
        finished = failed or obs.state in FINAL_STATES
        await self.state.track(c, job, fields, forget_progress=finished)
        self.follower.refresh(job)
        if info.get("unmapped") and (obs.nodes or finished):
            await self._publish_held(obs, info["unmapped"])
        if not finished:
            await self.tracker.on_attempt(job, obs.restarts, running=obs.state == "RUNNING", finished=False)

        if failed:
            await self.follower.read_job(job)
            if not explained and not await self.state.has_anomaly(c, job, obs.restarts):
                age = (utcnow() - obs.observed_at).total_seconds()
                if age < self.grace_s:
                    raise TemporaryError("waiting for log lines that explain the failure",
                                         delay=self.grace_s - age)
                candidate = await self.state.candidate(c, job, obs.restarts)
                if candidate:
                    anomaly = AnomalyDetected.model_validate_json(candidate)
                else:  # the log was read above, if it could be: say so when it could not
                    paths = [p for p in dict.fromkeys((fields["stdout"], fields["stderr"])) if p]
                    problem = await asyncio.to_thread(unreadable_reason, paths, access)
                    anomaly = crash_from_scheduler(obs, utcnow(), log_problem=problem)
                if anomaly is not None:
                    await self._publish(anomaly, obs.observed_at)
            await self.state.untrack(c, job)
        elif obs.state in ENDED_UNFAILED:
            await self.follower.read_job(job)
            await self.state.untrack(c, job)

    async def _publish_held(self, obs: JobObserved, held: str) -> None:
        """A crash held for its addresses' nodes: its culprits mapped with this observation's NodeAddr (for
        its own attempt), published unless the attempt has its anomaly by now."""
        await self.state.track(obs.cluster, obs.job_id, {"unmapped": ""})
        anomaly, evidence_at = mapped_held(held, obs)
        if anomaly is not None and not await self.state.has_anomaly(obs.cluster, obs.job_id, anomaly.attempt):
            await self.anomalies.publish(anomaly, evidence_at)

    async def _publish(self, anomaly: AnomalyDetected, evidence_at: dt.datetime) -> None:
        if anomaly.last_step is None:
            step = await self.tracker.last_step(anomaly.job_id, anomaly.attempt)
            if step is not None:
                anomaly = anomaly.model_copy(update={"last_step": step})
        await self.anomalies.publish(anomaly, evidence_at)

