"""The API's NATS side (the only module of the API that talks to NATS): live reading of the EVENTS
stream for /v1/events/stream, and publishing the audit entry of an operator override.

Each live reader is a FastStream subscriber of its own on the API's broker, declared by
relaunch.common.consumers.API_EVENTS: a JetStream *ordered consumer*, ephemeral, in memory, no acks,
and recreated by the client library from the last sequence it saw if a message goes missing, so a
browser tab leaves nothing behind on the server when it closes. The subscriber is not persistent
on the broker: dropped with the reader.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from faststream.nats import NatsRouter
from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from relaunch.common import consumers, subjects
from relaunch.common.natsauth import LEASE_BUCKET
from relaunch.common.connection import Bus
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Message

from ..domain.streaming import STREAM

log = logging.getLogger(__name__)

RECONNECT_S = 5.0
"""Pause between attempts to reach NATS while the API runs without it (the ledger endpoints still work)."""
PENDING_MAX = 4096
"""Messages one live reader may have queued before the client library drops them; the ordered consumer
then resumes from the last one delivered, so a slow browser costs bounded memory and loses nothing."""
QUEUE_MAX = 64
"""Messages handed over to one reader and not yet sent to its browser."""


class EventsUnavailable(Exception):
    """NATS cannot serve live events now; the message says what to check."""


class StreamClosed(Exception):
    """The subscription ended (NATS closed the connection); the client reconnects with Last-Event-ID."""


@dataclass(frozen=True)
class StreamedEvent:
    seq: int
    subject: str
    data: bytes
    at: dt.datetime | None


class EventSubscription:
    """One reader's subscriber and the messages it handed over. The handler waits while the reader's
    queue is full, so NATS' pending queue (PENDING_MAX) fills and drops, and the ordered consumer
    resumes from the last message delivered: a slow browser costs bounded memory and loses nothing."""

    def __init__(self, bus: Bus, subject: str, config: ConsumerConfig) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=QUEUE_MAX)
        self._sub = consumers.reader(bus.broker, consumers.API_EVENTS, subject, config, pending_msgs=PENDING_MAX,
                                     persistent=False)

        async def hand_over(body: bytes, msg: NatsMessage) -> None:
            await self._queue.put(msg.raw_message)

        self._sub(hand_over)
        self._closed = False

    async def start(self) -> None:
        await self._sub.start()

    async def next(self, timeout: float) -> StreamedEvent | None:
        """The next message, or None when none came within `timeout` seconds; StreamClosed at the end."""
        if self._bus.nc.is_closed:
            raise StreamClosed("the connection to NATS is closed")
        try:
            msg = await asyncio.wait_for(self._queue.get(), timeout=timeout)
        except TimeoutError:
            return None
        meta = msg.metadata
        return StreamedEvent(meta.sequence.stream, msg.subject, msg.data, meta.timestamp)

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._sub.stop()
        except (nats.errors.Error, OSError) as exc:  # the connection is gone: so is the consumer
            log.debug("unsubscribe failed: %s", exc)
        # Marked only once done: a close cancelled halfway is completed by the next call.
        self._closed = True


class BusEvents:
    def __init__(self, nats_url: str, cluster: str = "local") -> None:
        self.nats_url, self.cluster = nats_url, cluster
        self._bus: Bus | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Connect in the background: the API serves the ledger whether or not NATS is up yet."""
        self._task = asyncio.create_task(self._keep_connecting())

    async def _keep_connecting(self) -> None:
        while self._bus is None:
            try:
                self._bus = await Bus.connect(self.nats_url, "api", wait_s=RECONNECT_S)
            except TemporaryError as exc:
                log.warning("live events unavailable until NATS answers: %s", exc)
                await asyncio.sleep(RECONNECT_S)

    @property
    def connected(self) -> bool:
        return self._bus is not None and self._bus.connected

    def _ready(self) -> Bus:
        if self._bus is None or not self._bus.connected:
            raise EventsUnavailable(f"NATS at {self.nats_url} is not connected: check that it runs (make up) and "
                                    "RELAUNCH_NATS_URL; the ledger endpoints work meanwhile")
        return self._bus

    async def subscribe(self, subject: str, *, since: dt.datetime | None = None,
                        after_seq: int | None = None) -> EventSubscription:
        """Live messages on `subject`: after stream sequence `after_seq`, else from time `since`, else new ones."""
        bus = self._ready()
        if after_seq is not None:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1)
        elif since is not None:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since)
        else:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
        sub = EventSubscription(bus, subject, config)
        try:
            await sub.start()
        except (nats.errors.Error, nats.js.errors.Error, OSError) as exc:
            raise EventsUnavailable(
                f"cannot read the {STREAM.name} stream from NATS at {self.nats_url}: {exc}") from exc
        return sub

    async def health(self) -> dict:
        """relaunch's own health as the bus sees it: each readable durable's lag (messages not yet
        delivered, and delivered but not acked), the DLQ's size, and the actuator holding the lease."""
        bus = self._ready()
        lags = []
        for c in consumers.ALL:
            if c.spec.stream is subjects.ADVICE:
                continue  # only the actuator may read ADVICE's consumer (docs/security.md)
            try:
                info = await bus.js.consumer_info(c.spec.stream.name, c.spec.durable, timeout=2)
                lags.append({"service": c.service, "durable": c.spec.durable, "stream": c.spec.stream.name,
                             "pending": info.num_pending, "ack_pending": info.num_ack_pending,
                             "redelivered": info.num_redelivered})
            except nats.js.errors.NotFoundError:
                lags.append({"service": c.service, "durable": c.spec.durable, "stream": c.spec.stream.name,
                             "pending": None, "ack_pending": None, "redelivered": None, "missing": True})
        dlq = await bus.js.stream_info(subjects.DLQ.name)
        leader = None
        try:
            kv = await bus.js.key_value(LEASE_BUCKET)
            entry = await kv.get(f"actuator.{self.cluster}")
            leader = entry.value.decode() if entry and entry.value else None
        except (nats.js.errors.Error, nats.errors.Error):
            leader = None
        return {"consumers": lags, "dlq_messages": dlq.state.messages, "leader": leader}

    async def publish(self, subject: str, model: Message, msg_id: str) -> bool:
        """Publish durably; False when NATS is not available (the caller decides what that means)."""
        try:
            await self._ready().publish(subject, model, msg_id=msg_id)
            return True
        except (EventsUnavailable, TemporaryError, nats.errors.Error, nats.js.errors.Error, OSError) as exc:
            log.warning("could not publish %s: %s", subject, exc)
            return False

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._bus is not None:
            await self._bus.close()


def router() -> NatsRouter:
    """The API's live reader, declared alone (for the AsyncAPI document; each reader at run time is
    a subscriber of its own, `EventSubscription`)."""
    r = NatsRouter()

    async def read(body: bytes) -> None:
        raise RuntimeError("a router declared for the AsyncAPI document only is never served")

    consumers.reader(r, consumers.API_EVENTS)(read)
    return r
