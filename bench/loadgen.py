"""Helpers of bench/load.py: the synthetic jobs, a JetStream publisher with acknowledged publishes
kept in flight (like Go's PublishAsync), the progress publisher process and the bare nats-py
consumer that the detector is compared with.

Each of the two load processes (publisher, bare consumer) is its own OS process, as the detector is,
so that none of them shares an event loop with another; they report through multiprocessing values.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import json
import multiprocessing as mp
import time
from dataclasses import dataclass

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from relaunch.common import subjects
from relaunch.common.schemas import JobObserved, LogBatch, ProgressReported, dump

BARE_DURABLE = "bench-bare-progress"
"""The bare consumer's durable on the SIGNALS stream (same filter as the detector's progress consumer)."""

IB_LINE = ("{node}:31337:31400 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> "
           "with error 12, opcode 1, len 0, vendor err 129 (Send)")
"""What each rank behind a failed switch prints (the catalogue's nccl_ib_error: fault domain hardware)."""


@dataclass(frozen=True)
class Job:
    job_id: str
    nodes: tuple[str, str]


def make_jobs(count: int, nonce: int) -> list[Job]:
    """`count` two-node jobs with ids unique to this run (so ledger and Redis rows of earlier runs
    never meet this one's): <nonce><index>, all digits like a Slurm job id."""
    return [Job(f"{nonce}{i:06d}", (f"gn{2 * i:05d}", f"gn{2 * i + 1:05d}")) for i in range(count)]


def observed(cluster: str, job: Job, state: str, exit_code: int | None = None, stdout: str = "") -> JobObserved:
    return JobObserved(cluster=cluster, job_id=job.job_id, name=f"load-{job.job_id}", state=state,
                       reason="None" if state == "RUNNING" else "NonZeroExitCode", restarts=0,
                       nodes=list(job.nodes), comment="relaunch", partition="gpu", stdout=stdout, stderr=stdout,
                       exit_code=exit_code, observed_at=dt.datetime.now(dt.UTC), user_id=os.geteuid(),
                       group_id=os.getegid())


def ib_failure(cluster: str, job: Job) -> LogBatch:
    return LogBatch(cluster=cluster, job_id=job.job_id, attempt=0, path=f"/bench/{job.job_id}.out", offset=0,
                    lines=[IB_LINE.format(node=job.nodes[0])], read_at=dt.datetime.now(dt.UTC))


_PROGRESS = ('{{"schema":"relaunch.progress/v1","cluster":"{c}","job_id":"{j}","step":{s},"throughput":null,'
             '"step_time_s":1.0,"rank":null,"node":null,"at":"{at}","loss":null,"grad_norm":null,"loss_scale":null,'
             '"skipped":null,"key":null,"checkpoint_saved":null}}')


def progress_body(cluster: str, job_id: str, step: int, at: str) -> bytes:
    """A ProgressReported body, formatted directly (a publisher at 10k msgs/s cannot afford pydantic)."""
    return _PROGRESS.format(c=cluster, j=job_id, s=step, at=at).encode()


def check_progress_body(cluster: str) -> None:
    """The hand-made body must be exactly what the model accepts and emits."""
    at = dt.datetime.now(dt.UTC)
    body = progress_body(cluster, "1", 5, at.isoformat().replace("+00:00", "Z"))
    model = ProgressReported.model_validate_json(body)
    assert json.loads(dump(model)) == json.loads(body), (dump(model), body)


class AckedPublisher:
    """JetStream publishes with their PubAcks counted asynchronously, at most `window` in flight."""

    def __init__(self, nc, window: int = 4096) -> None:
        self.nc, self.window = nc, window
        self.sent = self.acked = self.errors = 0
        self._room = asyncio.Event()
        self._room.set()

    async def start(self) -> AckedPublisher:
        self.prefix = self.nc.new_inbox()
        await self.nc.subscribe(self.prefix + ".*", cb=self._on_ack, pending_msgs_limit=1_000_000,
                                pending_bytes_limit=512 * 1024 * 1024)
        return self

    async def _on_ack(self, msg) -> None:
        if b'"error"' in msg.data:
            self.errors += 1
        else:
            self.acked += 1
        if self.sent - self.acked - self.errors < self.window:
            self._room.set()

    async def publish(self, subject: str, data: bytes) -> None:
        while self.sent - self.acked - self.errors >= self.window:
            self._room.clear()
            await self._room.wait()
        self.sent += 1
        await self.nc.publish(subject, data, reply=f"{self.prefix}.{self.sent}")

    async def settle(self, timeout_s: float = 60.0) -> None:
        """Wait until every publish is acknowledged (or refused)."""
        await self.nc.flush()
        end = time.monotonic() + timeout_s
        while self.acked + self.errors < self.sent and time.monotonic() < end:
            await asyncio.sleep(0.01)


# -- the progress publisher process --------------------------------------------------------------

class PublisherControl:
    """Shared between the orchestrator and the publisher process."""

    def __init__(self, ctx) -> None:
        self.steady = ctx.Event()       # publish at the steady rate while set
        self.quit = ctx.Event()
        self.skip_first = ctx.Value("i", 0, lock=False)   # jobs [0, n) stopped reporting (they failed)
        self.burst = ctx.Value("q", 0, lock=False)        # > 0: publish this many as fast as possible
        self.burst_done = ctx.Event()
        self.offered = ctx.Value("q", 0, lock=False)      # publishes made
        self.stored = ctx.Value("q", 0, lock=False)       # PubAcks received
        self.refused = ctx.Value("q", 0, lock=False)
        self.behind = ctx.Value("q", 0, lock=False)       # steady publishes given up (the publisher fell behind)


def publisher_main(url: str, options: dict, cluster: str, job_ids: list[str], rate_hz: float,
                   ctl: PublisherControl) -> None:
    asyncio.run(_publisher(url, options, cluster, job_ids, rate_hz, ctl))


async def _publisher(url: str, options: dict, cluster: str, job_ids: list[str], rate_hz: float,
                     ctl: PublisherControl) -> None:
    nc = await nats.connect(url, name="bench-load-publisher", **options)
    pub = await AckedPublisher(nc).start()
    subject = [subjects.signal_progress(cluster, j) for j in job_ids]
    rate = len(job_ids) * rate_hz
    cursor, step, started, due_sent = 0, 1, None, 0

    async def one() -> None:
        nonlocal cursor, step
        if cursor < ctl.skip_first.value:
            cursor = ctl.skip_first.value
        if cursor >= len(job_ids):
            cursor, step = ctl.skip_first.value, step + 1
        await pub.publish(subject[cursor], progress_body(cluster, job_ids[cursor], step, now_iso))
        cursor += 1

    while not ctl.quit.is_set():
        now_iso = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
        if ctl.burst.value > 0:
            for _ in range(ctl.burst.value):
                await one()
            await pub.settle()
            ctl.burst.value = 0
            ctl.burst_done.set()
        elif ctl.steady.is_set():
            now = time.monotonic()
            if started is None:
                started, due_sent = now, 0
            due = int((now - started) * rate) - due_sent
            if due > rate:  # more than a second behind: give those up rather than burst later
                ctl.behind.value += due - int(rate / 10)
                due_sent += due - int(rate / 10)
                due = int(rate / 10)
            for _ in range(due):
                await one()
            due_sent += due
        else:
            started = None
        ctl.offered.value, ctl.stored.value, ctl.refused.value = pub.sent, pub.acked, pub.errors
        await asyncio.sleep(0.01)
    await pub.settle(10)
    ctl.offered.value, ctl.stored.value, ctl.refused.value = pub.sent, pub.acked, pub.errors
    await nc.close()


# -- the bare consumer process -------------------------------------------------------------------

def bare_main(url: str, options: dict, batch: int, handled, ready, quit) -> None:
    asyncio.run(_bare(url, options, batch, handled, ready, quit))


async def _bare(url: str, options: dict, batch: int, handled, ready, quit) -> None:
    """The least a nats-py service must do per message: pull it and acknowledge it."""
    nc = await nats.connect(url, name="bench-bare-consumer", **options)
    js = nc.jetstream()
    spec = subjects.DETECTOR_PROGRESS
    await js.add_consumer(spec.stream.name, ConsumerConfig(
        durable_name=BARE_DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.NEW,
        ack_wait=spec.ack_wait_s, max_deliver=spec.max_deliver, filter_subject=spec.filter_subject))
    sub = await js.pull_subscribe_bind(BARE_DURABLE, stream=spec.stream.name)
    ready.set()
    while not quit.is_set():
        try:
            msgs = await sub.fetch(batch, timeout=0.5)
        except (nats.errors.TimeoutError, TimeoutError):
            continue
        for msg in msgs:
            await msg.ack()
        handled.value += len(msgs)
    await nc.close()


def nats_options(run_dir) -> dict:
    """The bench connects as the stack's NATS admin when the stack has users (scripts/stack.sh writes
    their passwords under <run>/creds), else anonymously."""
    from pathlib import Path

    password = Path(run_dir) / "creds" / "admin.pass"
    if not password.exists():
        return {}
    return {"user": "admin", "password": password.read_text().strip(), "inbox_prefix": "_INBOX_admin"}


def spawn(target, *args) -> mp.Process:
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc
