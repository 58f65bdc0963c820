"""The detector's log follower: reads new lines of every followed job's files at the byte offsets kept
in Redis and publishes them as LogBatch signals (docs/architecture.md, "Detection" and "Scale")."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import time

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.lanes import KeyedLanes
from relaunch.common.clock import utcnow
from relaunch.common.periodic import every, warn_on
from relaunch.common.schemas import AuditEntry, LogBatch

from ..domain.file_access import Refused
from ..metrics import LINES, LOG_REFUSED
from .hotstate import HotState
from .logfiles import Access, Chunk, file_sizes, read_new_lines, written_by

log = logging.getLogger(__name__)


PATHS_REFRESH_S = 60.0
"""How often the follower re-reads every followed job's file names from Redis whatever happened. A
job's files change only with a JobObserved: this process hears of its own at once, and a job that
another replica starts following changes the followed set's version; a new file name that another
replica saw for a job already followed waits for this refresh (that replica reads the file meanwhile)."""


QUIET_S = 10.0
"""A file whose size has not changed for this long is looked at every quiet_interval_s instead of
every interval_s (see Follower)."""

COLD_S = 60.0
"""A file whose size has not changed for this long is looked at every cold_interval_s (see Follower)."""


class Follower:
    """Reads new lines of every followed job's files and publishes them as LogBatch signals.

    With thousands of followed jobs a pass must stay cheap: the followed set is read again only when
    it changed (its version in Redis), the files' names are kept in memory, the files are stat()ed in
    one thread hop, and only a job whose file changed size since this process last read it costs Redis
    round trips (read_job). Offsets stay in Redis, so a restart or another replica resumes exactly; a
    restarted process reads every job once.

    Files are looked at by how long ago they last grew (or this process began following them):
    within QUIET_S seconds (a job printing, every newly followed job) every `interval_s`; within COLD_S
    every `quiet_interval_s` (a job between its progress lines prints at least every few seconds);
    longer ago every `cold_interval_s`. A crash is printed by a process that was printing, and the
    FAILED observation reads the log's last lines itself, so this costs a silent job's crash line (say
    after a long hang) at most cold_interval_s, a line after a silence of at least a minute a few
    seconds, while 10,000 silent files cost a fiftieth of the stat() calls (on a shared filesystem,
    metadata requests to its server).
    """

    def __init__(self, bus: Bus, state: HotState, cluster: str, interval_s: float, batch_bytes: int,
                 quiet_interval_s: float = 1.0, cold_interval_s: float = 5.0, log_roots: tuple[str, ...] = (),
                 ) -> None:
        self.bus, self.state, self.cluster = bus, state, cluster
        self.log_roots = log_roots
        """The operator's allowed roots of job output (with each job's working directory: logfiles.Access)."""
        self._refused: set[tuple[str, str]] = set()
        """(job, path) refusals already logged and audited by this process (bounded: cleared past 10,000)."""
        self.interval_s, self.batch_bytes = interval_s, batch_bytes
        self.quiet_interval_s = max(quiet_interval_s, interval_s)
        self.cold_interval_s = max(cold_interval_s, self.quiet_interval_s)
        self._lanes = KeyedLanes()
        """A job's reads one after another; an entry only while one is under way (a lock kept per job
        was a few hundred bytes for every followed job)."""
        self._paths: dict[str, tuple[str, ...]] = {}
        self._sizes: dict[tuple[str, str], int | None] = {}
        self._paths_read_at = float("-inf")
        self._followed: list[str] = []
        self._followed_version: str | None = None
        self._files: list[tuple[str, str]] | None = None
        """(job, path) of every followed job; None when the followed set or a job's files changed."""
        self._changed_at: dict[tuple[str, str], float] = {}
        self._looked_at: dict[tuple[str, str], float] = {}
        """When (epoch seconds) this process last saw the file with nothing new in it: a look that found its
        size unchanged, or a read to its end. Lines read later were written after it (logfiles.written_by)."""
        """When this process first saw the file or saw its size change (loop time)."""
        self._warm: list[tuple[str, str]] = []
        """The files that grew within COLD_S (as of the last pass over them)."""
        self._hot: list[tuple[str, str]] = []
        """The files that grew within QUIET_S (as of the last pass over them)."""
        self._warm_at = self._all_at = float("-inf")

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, self.pass_once, stop, on_error=warn_on(log, "follower: %s"))

    async def pass_once(self, everything: bool = False, now: float | None = None) -> None:
        """Read every followed job whose files changed size since this process last read them: the
        recently written files, the quiet ones too once quiet_interval_s has passed, and all of them
        once cold_interval_s has passed or with `everything`. `now`: the event loop's time (tests
        pass their own)."""
        now = asyncio.get_running_loop().time() if now is None else now
        version = await self.state.followed_version(self.cluster)
        refresh_paths = now - self._paths_read_at >= PATHS_REFRESH_S
        if version is None or version != self._followed_version or refresh_paths:
            self._followed = await self.state.followed(self.cluster)
            self._followed_version = version
            self._files = None
        if refresh_paths:
            self._paths.clear()
            self._paths_read_at = now
        if self._files is None:
            unknown = [j for j in self._followed if j not in self._paths]
            if unknown:
                self._paths.update(await self.state.paths_many(self.cluster, unknown))
            self._forget_unfollowed(set(self._followed))
            self._files = [(job, path) for job in self._followed for path in self._paths.get(job, ())]
            for key in self._files:  # (the files' own key tuples, one per file, not a copy in each map)
                self._changed_at.setdefault(key, now)
                self._sizes.setdefault(key, None)  # None: not read yet
            self._warm = self._within(self._files, COLD_S, now)
            self._hot = self._within(self._warm, QUIET_S, now)
        every_file = self._files  # (a JobObserved may set self._files to None while this pass waits)
        if everything or now - self._all_at >= self.cold_interval_s:
            tier, files = "all", every_file
        elif now - self._warm_at >= self.quiet_interval_s:
            tier = "warm"
            files = self._warm = self._within(self._warm, COLD_S, now)
        else:
            tier = "hot"
            files = self._hot = self._within(self._hot, QUIET_S, now)
        looked = time.time()
        sizes = await asyncio.to_thread(file_sizes, [path for _, path in files])
        known = self._sizes
        grown: dict[tuple[str, str], int] = {}
        looked_at = self._looked_at
        for key, size in zip(files, sizes):  # one walk over the files on this hot path
            if size is None:
                continue
            if known.get(key) != size:
                grown[key] = size
            else:
                looked_at[key] = looked
        by_job: dict[str, list[tuple[str, str]]] = {}
        for key in grown:
            by_job.setdefault(key[0], []).append(key)
        for job, keys in by_job.items():
            await self.read_job(job)
            for key in keys:
                self._sizes[key] = grown[key]
                self._changed_at[key] = now
        # A file that grew on a pass is among the files of every shorter span already.
        if tier == "all":
            self._all_at = now
            self._warm = self._within(every_file, COLD_S, now)
        if tier != "hot":
            self._warm_at = now
            self._hot = self._within(self._warm, QUIET_S, now)

    def _within(self, keys: list[tuple[str, str]], span_s: float, now: float) -> list[tuple[str, str]]:
        """The files among `keys` that grew (or were first seen) less than span_s ago."""
        changed_at, since = self._changed_at, now - span_s
        return [key for key in keys if changed_at.get(key, now) > since]

    def refresh(self, job_id: str) -> None:
        """The job's files may have changed (a JobObserved): look them up and read them on the next pass."""
        for path in self._paths.pop(job_id, ()):
            self._sizes.pop((job_id, path), None)
            self._changed_at.pop((job_id, path), None)
            self._looked_at.pop((job_id, path), None)
        self._files = None

    def _forget_unfollowed(self, followed: set[str]) -> None:
        for job in [j for j in self._paths if j not in followed]:
            self.refresh(job)

    async def read_job(self, job_id: str) -> bool:
        """Publish every complete line written since the last read (serialised per job); whether there
        was any."""
        published = False
        async with self._lanes.turn(job_id):
            info = await self.state.job(self.cluster, job_id)
            if not info:
                return False
            attempt = int(info.get("attempt", "0"))
            access = Access.of(info, self.log_roots)
            for path in dict.fromkeys(p for p in (info.get("stdout"), info.get("stderr")) if p):
                offset = int(info.get(f"off:{path}", "0"))
                looked_at = self._looked_at.get((job_id, path))
                while True:
                    reading = time.time()
                    try:
                        chunk = await asyncio.to_thread(read_new_lines, path, offset, access)
                    except Refused as refusal:
                        await self._refuse(job_id, path, str(refusal))
                        break
                    if chunk is None or chunk.next_offset == offset:
                        break
                    await self._publish(job_id, attempt, path, chunk, looked_at)
                    published = published or bool(chunk.lines)
                    offset = chunk.next_offset
                    # Crash between publish and this write: the batch is re-read and re-published with
                    # the same Msg-Id, which JetStream drops.
                    await self.state.set_offset(self.cluster, job_id, path, offset)
                    if not chunk.more:
                        self._looked_at[(job_id, path)] = reading  # what comes next was written after this read
                        break  # all there was: no second open (each is a checked walk, logfiles.open_as_owner)
        return published

    async def _refuse(self, job_id: str, path: str, why: str) -> None:
        """A file not read for the job's user: counted every time, logged and audited once per job and path
        (the audit entry's Msg-Id makes it once across replicas and restarts too)."""
        LOG_REFUSED.inc()
        if (job_id, path) in self._refused:
            return
        if len(self._refused) > 10_000:
            self._refused.clear()
        self._refused.add((job_id, path))
        log.warning("job %s: output not read: %s", job_id, why)
        key = f"detector.log-refused.{self.cluster}.{job_id}.{hashlib.sha1(path.encode()).hexdigest()[:12]}"
        entry = AuditEntry(cluster=self.cluster, job_id=job_id, service="detector", action="output not read",
                           detail=why[:1000], idempotency_key=key, at=utcnow())
        try:
            await self.bus.publish(subjects.event_audit(self.cluster, job_id), entry, msg_id=key)
        except Exception as exc:  # noqa: BLE001 - the refusal stands; the entry is tried again on the next look
            self._refused.discard((job_id, path))
            log.warning("job %s: could not publish the refusal's audit entry: %s", job_id, exc)

    async def _publish(self, job_id: str, attempt: int, path: str, chunk: Chunk,
                       looked_at: float | None = None) -> None:
        """Split a chunk into batches under batch_bytes; each Msg-Id names its exact byte range,
        so a re-read after a crash is either dropped as a duplicate or re-scanned, never lost. Each batch's
        read_at is when its lines were written at the latest (logfiles.written_by), not merely when they were
        read."""
        LINES.inc(len(chunk.lines))
        read_at = dt.datetime.fromtimestamp(written_by(utcnow().timestamp(), chunk.mtime, looked_at), dt.UTC)
        path_key = hashlib.sha1(path.encode()).hexdigest()[:12]
        start_index, start_offset, size = 0, chunk.offset, 0
        for i, line in enumerate(chunk.lines):
            size += _wire_len(line)
            last = i == len(chunk.lines) - 1
            if not last and size + _wire_len(chunk.lines[i + 1]) <= self.batch_bytes:
                continue
            batch = LogBatch(cluster=self.cluster, job_id=job_id, attempt=attempt, path=path,
                             offset=start_offset, lines=chunk.lines[start_index: i + 1], read_at=read_at)
            await self.bus.publish(subjects.signal_log(self.cluster, job_id), batch,
                                   msg_id=f"log.{self.cluster}.{job_id}.{path_key}.{start_offset}-{chunk.ends[i]}")
            start_index, start_offset, size = i + 1, chunk.ends[i], 0


def _wire_len(line: str) -> int:
    """Bytes a line takes in a LogBatch body: a control character takes six as JSON (a log of them
    would otherwise make a batch larger than NATS accepts, and stop the follower on that file)."""
    return len(json.dumps(line, ensure_ascii=False).encode()) - 1
