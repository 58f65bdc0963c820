"""report_progress(): forward progress from training code, never slowing the training loop.

The call only puts a small record on a bounded in-process queue (no I/O, no lock contention with
the bus); a daemon thread publishes it to `relaunch.signal.progress.<cluster>.<job>` with a plain
NATS publish (the SIGNALS stream captures it). When the queue is full or the bus is down, records
are dropped and counted (`dropped`), never buffered without bound and never raised into training.

Each reporter makes a random key and prints it once on stderr, which Slurm writes into the job's log
("relaunch: progress key <key>"); every report carries it, and the detector accepts a report only when
it has read that line in the job's own log (relaunch.common.progress_keys, docs/security.md).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import queue
import re
import secrets
import sys
import threading

from relaunch.common import subjects
from relaunch.common.progress_keys import key_line
from relaunch.common.schemas import ProgressReported, dump
from relaunch.common.settings import NotSet, nats_servers

from . import settings as client_settings

log = logging.getLogger(__name__)

POLL_S = 0.05
"""How often the publishing thread looks at the queue when it is empty (a report waits at most this long)."""


class ProgressReporter:
    def __init__(self, nats_url: str, cluster: str, job_id: str, node: str | None = None,
                 max_pending: int = 1000, key: str | None = None) -> None:
        self.nats_url, self.cluster, self.job_id, self.node = nats_url, cluster, job_id, node
        self.subject = subjects.signal_progress(cluster, job_id)
        self.key = key or secrets.token_hex(16)
        """Binds this reporter's reports to the job: printed once into the job's log (stderr), here."""
        if key is None:
            print(key_line(self.key, job_id), file=sys.stderr, flush=True)
        self._queue: queue.Queue[ProgressReported | None] = queue.Queue(maxsize=max_pending)
        self.sent = 0
        self.dropped = 0
        self._warned = False
        """Whether the one stderr line saying reports do not reach the bus was printed (at most once)."""
        self._thread = threading.Thread(target=self._run, name="relaunch-progress", daemon=True)
        self._thread.start()

    def report(self, step: int, throughput: float | None = None, step_time_s: float | None = None,
               rank: int | None = None, loss: float | None = None, grad_norm: float | None = None,
               loss_scale: float | None = None, skipped: bool | None = None,
               checkpoint_saved: bool | None = None) -> None:
        try:
            record = ProgressReported(cluster=self.cluster, job_id=self.job_id, step=step, throughput=throughput,
                                      step_time_s=step_time_s, rank=rank, node=self.node, at=dt.datetime.now(dt.UTC),
                                      loss=loss, grad_norm=grad_norm, loss_scale=loss_scale, skipped=skipped,
                                      key=self.key, checkpoint_saved=checkpoint_saved or None)
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
        except ValueError as exc:  # bad values from the caller: count, say once, never raise into training
            if self.dropped == 0:
                log.warning("relaunch: progress record refused: %s", exc)
            self.dropped += 1

    def close(self, timeout: float = 2.0) -> None:
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout)

    def _run(self) -> None:
        asyncio.run(self._publish_loop())

    async def _publish_loop(self) -> None:
        import nats

        from relaunch.common.connection import connect_options  # user and TLS from RELAUNCH_NATS_* settings

        nc = None
        while True:
            # Polled, not waited for in an executor thread: at exit the interpreter joins every executor
            # thread, and one blocked in queue.get() would keep a finished training from ever exiting
            # (relaunch then declared the healthy job hung: the real-framework tier caught it). This
            # thread is a daemon and owns no executor, so the process exits as it would without it.
            try:
                record = self._queue.get_nowait()
            except queue.Empty:
                await asyncio.sleep(POLL_S)
                continue
            if record is None:
                break
            try:
                if nc is None or nc.is_closed:
                    nc = await nats.connect(nats_servers(self.nats_url), connect_timeout=2, max_reconnect_attempts=3,
                                            allow_reconnect=True, reconnect_time_wait=0.5, error_cb=self._on_error,
                                            **connect_options())
                await nc.publish(self.subject, dump(record))
                self.sent += 1
            except Exception as exc:  # the bus is down or unreachable: drop and count, try again next record
                self.dropped += 1
                nc = None
                self.warn_once(exc)
        if nc is not None:
            await nc.drain()


    def warn_once(self, problem: object) -> None:
        """Say once on stderr (the job's log) that reports do not reach relaunch, and why: a wrong host,
        user, password or permission would otherwise drop every report in silence, and the user would
        believe the job watched for hangs by its progress when it is not (issue 40)."""
        if self._warned:
            return
        self._warned = True
        where = _URL_USERINFO.sub("//", self.nats_url)  # never print a password given in the URL
        why = str(problem)[:300] or type(problem).__name__
        print(f"relaunch: progress reports do not reach relaunch (NATS at {where}): {why}; they are dropped, and hangs are caught only from the log's own step lines. Check "
              "RELAUNCH_NATS_URL, RELAUNCH_NATS_USER and RELAUNCH_NATS_PASSWORD_FILE (docs/user-guide.md)",
              file=sys.stderr, flush=True)

    async def _on_error(self, exc: Exception) -> None:
        """nats-py reports connection errors here, and a publish the server refuses (a user without the
        permission) only here: said once; a transient disconnect, which the client retries, is not."""
        text = str(exc)
        if "Permissions Violation" in text or "Authorization Violation" in text or "authorization" in text.lower():
            self.warn_once(exc)


_URL_USERINFO = re.compile(r"//[^/@\s]*@")


_default: ProgressReporter | None = None
_default_lock = threading.Lock()
_unset = False
"""RELAUNCH_NATS_URL was not set in this Slurm job: said once on stderr, then every report is a no-op."""


def report_progress(step: int, throughput: float | None = None, step_time_s: float | None = None,
                    rank: int | None = None, loss: float | None = None, grad_norm: float | None = None,
                    loss_scale: float | None = None, skipped: bool | None = None,
                    checkpoint_saved: bool | None = None) -> None:
    """Report that the job reached `step`. A no-op outside a Slurm job (no SLURM_JOB_ID), and without
    RELAUNCH_NATS_URL (said once on stderr, where the job's log shows it).

    `loss` and `grad_norm` (NaN and infinity allowed), `loss_scale` and `skipped` (the step was skipped
    for fp16 overflow) feed divergence detection (docs/policy.md, "Divergence"). `checkpoint_saved`: a
    checkpoint holding `step` has just been written (report_checkpoint says it alone; docs/goodput.md)."""
    global _default, _unset
    if _default is None:
        if _unset:
            return
        with _default_lock:
            if _default is None and not _unset:
                job_id = os.environ.get("SLURM_JOB_ID")
                if not job_id:
                    return
                try:
                    url = client_settings.nats_url()
                except NotSet as exc:  # never raised into training; said once, where the job's log shows it
                    _unset = True
                    print(f"relaunch: progress is not reported: {exc}", file=sys.stderr, flush=True)
                    return
                _default = ProgressReporter(url, client_settings.job_cluster(), job_id,
                                            node=os.environ.get("SLURMD_NODENAME"))
        if _default is None:
            return
    _default.report(step, throughput, step_time_s, rank, loss, grad_norm, loss_scale, skipped, checkpoint_saved)


def report_checkpoint(step: int) -> None:
    """Report that a checkpoint holding `step` has been written (call it once the save is complete): a
    fact of the ledger, from which relaunch tells what a failure cost and where a restart resumes
    (docs/goodput.md). The same no-op rules as report_progress."""
    report_progress(step, checkpoint_saved=True)
