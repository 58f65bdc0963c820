"""The scheduler observer: polls Slurm and publishes JobObserved for opted-in jobs when what it sees changes.

Sources, in order of preference:
- `squeue --json` for every job slurmctld still knows (running, pending, and finished ones for
  MinJobAge seconds);
- `sacct` (job accounting) for the final state and exit code of an attempt slurmctld has already
  forgotten: a job seen here that leaves the squeue listing is looked up at once, and after any
  stretch in which we could have missed jobs (start-up, regained leadership, a gap between polls)
  the accounting records of that stretch are swept for opted-in jobs that ended unseen.

What is kept in memory is only a cache: a restarted observer republishes what it sees (the ledger
and JetStream's Msg-Id dedupe make that harmless) and sweeps accounting for what it missed.

Identity: JobObserved.submit_time is the submit time of the job's FIRST attempt. Slurm gives every
requeued attempt a new SubmitTime, so the current one would make each restart look like a new job;
for a restarted job the first one comes from the accounting chain (domain/accounting.py), and when
it cannot be known for sure it is left out (None) rather than guessed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.clock import utcnow
from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.job_states import FINAL_STATES
from relaunch.common.optin import parse_comment
from relaunch.common.periodic import every, warn_on
from relaunch.common.schemas import JobObserved

from .adapters.slurm import AccountingDisabled
from .slurm_port import SlurmPort
from .domain.accounting import REQUEUE_LINK, AccountedAttempt, job_chain
from .domain.node_facts import NodeFacts
from .domain.observing import Listing, SqueueJob, read_listing
from .domain.slurm_values import Unreadable

log = logging.getLogger(__name__)

OBSERVED = Counter("relaunch_jobs_observed_total", "JobObserved messages published")
FROM_ACCOUNTING = Counter("relaunch_jobs_observed_from_accounting_total",
                          "Final states published from sacct because slurmctld had forgotten the job",
                          ["path"])

NODES_TTL_S = 10.0
"""How long one node listing (sinfo: usable nodes per partition, NodeAddr, down nodes) is reused."""
GONE_TRIES = 30
"""Polls to wait for a vanished job's final accounting record before giving up on it (logged)."""
SWEEP_SLACK = dt.timedelta(seconds=30)
"""A sweep after a gap starts this long before the last good poll (clock skew, slow slurmdbd)."""
UNREADABLE = Counter("relaunch_slurm_unreadable_fields_total",
                     "Fields of a job in squeue --json the adapter could not read (once per job and field)",
                     ["field"])
POLL_ERRORS = Counter("relaunch_observer_errors_total", "Observer polls that failed unexpectedly (logged)")


@dataclass
class _Seen:
    """A job seen in squeue whose final state has not been published yet."""

    restarts: int
    submitted: dt.datetime | None
    first_submit: dt.datetime | None
    name: str
    comment: str
    partition: str
    tries: int = 0
    user_id: int | None = None
    group_id: int | None = None
    work_dir: str = ""


class Observer:
    def __init__(self, bus: Bus, slurm: SlurmPort, cluster: str, interval_s: float,
                 active: Callable[[], bool] = lambda: True, history_window_s: float = 900.0) -> None:
        self.bus, self.slurm, self.cluster, self.interval_s = bus, slurm, cluster, interval_s
        self.active = active
        self.history_window = dt.timedelta(seconds=history_window_s)
        self.gap = dt.timedelta(seconds=max(5.0, 3 * interval_s))
        self._last: dict[str, tuple] = {}
        self._paths: dict[tuple[str, int], tuple[str, str]] = {}
        self._open: dict[str, _Seen] = {}
        self._firsts: dict[str, tuple[dt.datetime, int, dt.datetime | None]] = {}
        self._nodes: tuple[float, NodeFacts] | None = None
        self._last_ok: dt.datetime | None = None
        self._accounting = True
        self._unreadable_seen: set[tuple[str, str]] = set()
        self.slurm_version: str | None = None

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, self._look, stop,
                    on_error=warn_on(log, "observer: %s", (TemporaryError, PermanentError), otherwise=self._crashed))

    async def _look(self) -> None:
        if self.slurm_version is None:
            await self._learn_version()
        if self.active():
            await self.poll_once()
        else:
            self._last.clear()  # a standby re-publishes what it sees once it leads
            self._last_ok = None  # ... and sweeps accounting for what it missed meanwhile

    def _crashed(self, exc: Exception) -> None:
        """Never the end of the loop, nor of the actuator: count it and look again."""
        POLL_ERRORS.inc()
        log.error("observer: unexpected error in a poll; polling again in %.1f s", self.interval_s, exc_info=exc)

    async def poll_once(self) -> None:
        started = utcnow()
        sweep_from = None
        if self._last_ok is None:
            sweep_from = started - self.history_window
        elif started - self._last_ok > self.gap:
            sweep_from = self._last_ok - SWEEP_SLACK
        try:
            listing = read_listing(await self.slurm.list_jobs())
        except Unreadable as exc:
            raise TemporaryError(f"squeue --json: {exc}", delay=self.interval_s) from exc
        self._report_unreadable(listing)
        listed = set(listing.listed)
        for job in listing.jobs:
            await self._publish_listed(job)
        if self._accounting:
            try:
                await self._vanished(listed)
                if sweep_from is not None:
                    await self._sweep(listed, sweep_from)
            except AccountingDisabled as exc:
                self._accounting = False
                self._open.clear()
                log.warning("observer: no job accounting on this cluster (%s): the final state of a job that "
                            "ends while the observer is not looking is lost", exc)
        self._last_ok = started

    async def _learn_version(self) -> None:
        """Log the Slurm release once; a controller that does not answer yet is asked again next poll."""
        try:
            self.slurm_version = await self.slurm.version()
        except PermanentError as exc:  # scontrol missing or refusing: polling says more, and goes on
            self.slurm_version = "unknown"
            log.warning("observer: the Slurm release is unknown: %s", exc)
            return
        log.info("observer: Slurm %s (squeue --json --states=all, sacct)", self.slurm_version)

    def _report_unreadable(self, listing: Listing) -> None:
        """Each field the adapter could not read is logged once per job and field, and counted."""
        for problem in listing.unreadable:
            key = (problem.job_id, problem.field)
            if key in self._unreadable_seen:
                continue
            if len(self._unreadable_seen) > 10_000:
                self._unreadable_seen.clear()
            self._unreadable_seen.add(key)
            UNREADABLE.labels(problem.field).inc()
            log.warning("observer: job %s: squeue --json field %r holds a value of shape %s that this relaunch "
                        "cannot read (Slurm %s): %s; nothing is done on what could not be read", problem.job_id,
                        problem.field, problem.shape, self.slurm_version or "?", problem.consequence)

    # --- jobs slurmctld still lists ---------------------------------------------------------------

    async def _publish_listed(self, job: SqueueJob) -> None:
        # A node of a running job that Slurm marks down is news (a node failure's failed node:
        # JobObserved.nodes_down), even while the job's own fields have not changed yet.
        facts = await self._node_facts()
        key = job.change_key() + (tuple(facts.down_of(job.nodes)) if facts else (),)
        if self._last.get(job.job_id) == key:
            return
        first = await self._first_submit(job)
        stdout, stderr = self._paths_of(job)
        await self._publish(job.job_id, key, name=job.name, state=job.state, reason=job.reason,
                            restarts=job.restarts, nodes=list(job.nodes), comment=job.comment,
                            partition=job.partition, stdout=stdout, stderr=stderr, exit_code=job.exit_code,
                            submit_time=first, user_id=job.user_id, group_id=job.group_id, work_dir=job.work_dir)
        if job.state in FINAL_STATES:
            self._open.pop(job.job_id, None)
        else:
            self._open[job.job_id] = _Seen(job.restarts, job.submitted, first, job.name, job.comment, job.partition,
                                           user_id=job.user_id, group_id=job.group_id, work_dir=job.work_dir)

    async def _first_submit(self, job: SqueueJob) -> dt.datetime | None:
        """The submit time of the job's first attempt (see the module docstring), or None."""
        if job.submitted is None:
            return None
        if job.restarts == 0:
            first: dt.datetime | None = job.submitted
        else:
            cached = self._firsts.get(job.job_id)
            if cached is not None and cached[0] == job.submitted:
                return cached[2]
            if cached is not None and cached[2] is not None and cached[1] < job.restarts and cached[0] < job.submitted:
                first = cached[2]  # we saw an earlier attempt of this very job
            else:
                first = await self._first_from_accounting(job)
        if len(self._firsts) > 10_000:
            self._firsts.clear()
        self._firsts[job.job_id] = (job.submitted, job.restarts, first)
        return first

    async def _first_from_accounting(self, job: SqueueJob) -> dt.datetime | None:
        if not self._accounting:
            return None
        try:
            chain = job_chain(await self.slurm.accounting([job.job_id]), job.job_id, before=job.submitted)
        except AccountingDisabled:
            self._accounting = False
            return None
        except TemporaryError as exc:
            log.info("observer: first submit time of job %s unknown for now: %s", job.job_id, exc)
            return None
        # The chain holds the attempts accounted so far (the current one may not be recorded yet):
        # only a chain that reaches attempt 0 (sacct's Restarts where the release has it, else a chain
        # as long as the restart counter says) proves where the job began.
        if not chain:
            return None
        if chain[0].restarts is not None:
            return chain[0].submit if chain[0].restarts == 0 else None
        if len(chain) < job.restarts:
            return None
        return chain[0].submit

    def _paths_of(self, job: SqueueJob) -> tuple[str, str]:
        """Where this attempt's output goes, from the very JSON entry its state came from (expanded by
        observing.output_paths_of); remembered for the accounting path once slurmctld forgets the job."""
        if not job.stdout:  # a pattern that cannot be expanded yet (%N before the job has nodes)
            return self._paths.get((job.job_id, job.restarts), ("", ""))
        if len(self._paths) > 10_000:
            self._paths.clear()
        self._paths[(job.job_id, job.restarts)] = (job.stdout, job.stderr)
        return job.stdout, job.stderr

    # --- jobs slurmctld has forgotten -------------------------------------------------------------

    async def _vanished(self, listed: set[str]) -> None:
        """Jobs we saw unfinished that squeue no longer lists: their final state from accounting."""
        gone = sorted(job_id for job_id in self._open if job_id not in listed)
        if not gone:
            return
        records = await self.slurm.accounting(gone)
        for job_id in gone:
            seen = self._open[job_id]
            chain = job_chain(records, job_id)
            index = next((i for i, r in enumerate(chain)
                          if seen.submitted is None or abs(r.submit - seen.submitted) <= REQUEUE_LINK), None)
            if index is None or not chain[-1].final:
                seen.tries += 1
                if seen.tries >= GONE_TRIES:
                    log.warning("observer: job %s left squeue but accounting has no final record of it", job_id)
                    self._open.pop(job_id)
                continue
            last = chain[-1]
            restarts = last.restarts if last.restarts is not None else seen.restarts + (len(chain) - 1 - index)
            await self._publish_accounted(chain[-1], restarts, seen.first_submit, seen, "vanished")
            self._open.pop(job_id)

    async def _sweep(self, listed: set[str], since: dt.datetime) -> None:
        """Opted-in jobs that ended since `since` and that squeue no longer lists."""
        recent = await self.slurm.accounting_since(since)
        candidates = sorted({r.job_id for r in recent if r.job_id not in listed and r.job_id not in self._open
                             and parse_comment(r.comment).opted_in})
        if not candidates:
            return
        records = await self.slurm.accounting(candidates)  # all of each job's attempts, not only the recent
        for job_id in candidates:
            chain = job_chain(records, job_id)
            if not chain or not chain[-1].final:
                continue
            attempt = chain[-1].restarts if chain[-1].restarts is not None else len(chain) - 1
            last = self._last.get(job_id)
            if last is not None and last[0] in FINAL_STATES and last[2] == attempt:
                continue  # squeue showed us this final state before slurmctld forgot the job
            # Where Restarts is known the chain may start after attempt 0 (records older than the
            # accounting window): the first submit time is then not known.
            first = chain[0].submit if (chain[0].restarts or 0) == 0 else None
            await self._publish_accounted(chain[-1], attempt, first, None, "sweep")

    async def _publish_accounted(self, record: AccountedAttempt, restarts: int, first: dt.datetime | None,
                                 seen: _Seen | None, path: str) -> None:
        key = (record.state, "", restarts, record.nodes, record.exit_code)
        if self._last.get(record.job_id) == key:
            return
        # Where the output went: what squeue said while the job was listed, else what accounting
        # says (StdOut/StdErr or the submit line); the detector reads that file before anything is decided.
        cached = self._paths.get((record.job_id, restarts)) or (
            self._paths.get((record.job_id, seen.restarts)) if seen else None)
        stdout, stderr = cached if cached and cached[0] else (record.stdout, record.stderr)
        # Whose job it is: the record's owner where it names one, else what squeue said (never a mix).
        user_id, group_id = ((record.user_id, record.group_id) if record.user_id is not None
                             else (seen.user_id, seen.group_id) if seen else (None, None))
        await self._publish(
            record.job_id, key, name=seen.name if seen else record.name, state=record.state, reason="",
            restarts=restarts, nodes=list(record.nodes), comment=seen.comment if seen else record.comment,
            partition=record.partition or (seen.partition if seen else ""), stdout=stdout, stderr=stderr,
            exit_code=record.exit_code, submit_time=first, user_id=user_id, group_id=group_id,
            work_dir=record.work_dir or (seen.work_dir if seen else ""))
        FROM_ACCOUNTING.labels(path).inc()
        log.info("observer: job %s attempt %d ended %s (exit code %s), from accounting (%s)", record.job_id,
                 restarts, record.state, record.exit_code, path)

    # --- publishing -------------------------------------------------------------------------------

    async def _publish(self, job_id: str, key: tuple, *, partition: str, nodes: list[str], **fields) -> None:
        facts = await self._node_facts()
        observed = JobObserved(cluster=self.cluster, job_id=job_id, partition=partition, nodes=nodes,
                               partition_nodes=facts.usable.get(partition) if facts else None,
                               node_addrs=facts.addrs_of(nodes) if facts else {},
                               nodes_down=facts.down_of(nodes) if facts else [], observed_at=utcnow(), **fields)
        digest = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
        await self.bus.publish(subjects.signal_job(self.cluster, job_id), observed,
                               msg_id=f"job.{self.cluster}.{job_id}.{digest}")
        OBSERVED.inc()
        self._last[job_id] = key

    async def _node_facts(self) -> NodeFacts | None:
        """The cluster's nodes (sinfo or slurmrestd, one call reused for NODES_TTL_S: domain/node_facts.py):
        usable nodes per partition, each node's NodeAddr, the nodes Slurm has given up on; None when unknown."""
        now = time.monotonic()
        if self._nodes is None or now - self._nodes[0] > NODES_TTL_S:
            try:
                self._nodes = (now, await self.slurm.node_facts())
            except (TemporaryError, PermanentError) as exc:
                log.info("observer: the cluster's nodes unknown for now: %s", exc)
                return None
        return self._nodes[1]
