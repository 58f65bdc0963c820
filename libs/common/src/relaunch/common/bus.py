"""NATS JetStream wiring shared by every service: connect, streams, publish, consume.

This is the one place where handler outcomes become acknowledgements (STYLE.md habit 5):
  handler returns         -> ack
  TemporaryError(delay)   -> nak(delay)                       (look again later)
  PermanentError, or a body that does not parse -> term() + DLQ entry with the reason
  any other exception     -> nak with back-off; dead-lettered on its last allowed delivery
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from prometheus_client import Counter
from pydantic import ValidationError

from . import subjects, telemetry
from .errors import PermanentError, TemporaryError
from .schemas import DeadLetter, Message, dump

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

CONSUMED = Counter(
    "relaunch_messages_consumed_total", "Messages taken from a durable consumer, by outcome",
    ["service", "consumer", "outcome"],
)
DEAD_LETTERS = Counter("relaunch_dead_letters_total", "Messages sent to the DLQ", ["service", "consumer"])

DLQ_PAYLOAD_KEEP = 64 * 1024
"""How much of a rejected body the DLQ entry keeps (the size is recorded whole)."""
BUG_DELIVERIES = 20
"""Deliveries after which a message whose handler keeps raising an unexpected error is dead-lettered,
for consumers with unbounded max_deliver."""


@dataclass(frozen=True)
class Delivery:
    """What a handler may know about the message besides its body."""

    subject: str
    num_delivered: int
    stream_seq: int


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Bus:
    """One NATS connection with JetStream, for one service."""

    def __init__(self, nc: NATS, service: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.service = service

    @classmethod
    async def connect(cls, url: str, service: str, *, wait_s: float = 60.0) -> Bus:
        """Connect, retrying while the server is not up yet (a service may start before NATS)."""
        deadline = asyncio.get_running_loop().time() + wait_s
        delay = 0.1
        while True:
            try:
                nc = await nats.connect(
                    url, name=f"relaunch-{service}", connect_timeout=2, allow_reconnect=True,
                    max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                )
                bus = cls(nc, service)
                await bus.ensure_streams()
                return bus
            except (OSError, TimeoutError, nats.errors.NoServersError, nats.errors.TimeoutError) as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise TemporaryError(f"NATS at {url} is not reachable: {exc}") from exc
                log.warning("waiting for NATS at %s: %s", url, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    @property
    def connected(self) -> bool:
        return self.nc.is_connected

    async def ensure_streams(self) -> None:
        """Create or update every stream in `subjects.STREAMS` (idempotent, safe to race)."""
        for spec in subjects.STREAMS:
            config = StreamConfig(
                name=spec.name, subjects=list(spec.subjects), max_age=spec.max_age_s,
                duplicate_window=spec.duplicate_window_s, storage=StorageType.FILE,
                max_msgs_per_subject=spec.max_msgs_per_subject,
            )
            try:
                await self.js.add_stream(config)
            except nats.js.errors.BadRequestError:
                await self.js.update_stream(config)

    async def publish(self, subject: str, model: Message, msg_id: str | None = None,
                      traceparent: str | None = None) -> bool:
        """Publish durably with the current trace context (or `traceparent`, for an outbox row);
        returns False when JetStream recognised `msg_id` as a duplicate."""
        headers = {subjects.MSG_ID_HEADER: msg_id} if msg_id else {}
        if traceparent:
            headers[telemetry.TRACEPARENT] = traceparent
        else:
            telemetry.inject(headers)
        ack = await self.js.publish(subject, dump(model), headers=headers or None)
        return not ack.duplicate

    async def dead_letter(self, subject: str, reason: str, data: bytes, msg_id: str | None) -> None:
        letter = DeadLetter(
            service=self.service, subject=subject, reason=reason[:2000],
            payload=data[:DLQ_PAYLOAD_KEEP].decode("utf-8", "replace"), payload_bytes=len(data), at=utcnow(),
        )
        await self.publish(subjects.dlq(self.service), letter, msg_id=msg_id)

    async def close(self) -> None:
        if not self.nc.is_closed:
            try:
                await asyncio.wait_for(self.nc.drain(), timeout=5)
            except (TimeoutError, nats.errors.Error):
                await self.nc.close()


async def consume(
    bus: Bus,
    spec: subjects.ConsumerSpec,
    model: type[M],
    handler: Callable[[M, Delivery], Awaitable[None]],
    stop: asyncio.Event,
    *,
    batch: int = 16,
    active: Callable[[], bool] | None = None,
) -> None:
    """Pull from a durable consumer until `stop` is set, mapping outcomes as the module says.

    `active`: when given and false (a standby without the lease), nothing is fetched.
    """
    config = ConsumerConfig(
        durable_name=spec.durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        ack_wait=spec.ack_wait_s, max_deliver=spec.max_deliver, filter_subject=spec.filter_subject,
    )
    while not stop.is_set():
        try:
            # Create, or update an existing durable whose settings changed in a new release
            # (ack_wait, max_deliver are editable); then bind to it.
            try:
                await bus.js.add_consumer(spec.stream.name, config)
            except nats.js.errors.BadRequestError as exc:
                log.warning("%s: keeping the existing consumer's settings: %s", spec.durable, exc)
            sub = await bus.js.pull_subscribe_bind(spec.durable, stream=spec.stream.name)
            break
        except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError, nats.js.errors.APIError) as exc:
            log.warning("%s: cannot bind consumer yet: %s", spec.durable, exc)
            await asyncio.sleep(1.0)
    else:
        return
    while not stop.is_set():
        if active is not None and not active():
            await asyncio.sleep(0.2)
            continue
        try:
            msgs = await sub.fetch(batch, timeout=0.5)
        except (nats.errors.TimeoutError, TimeoutError):
            continue
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
                nats.js.errors.APIError, nats.errors.Error) as exc:
            log.warning("%s: fetch failed (%s); retrying", spec.durable, exc)
            await asyncio.sleep(0.5)
            continue
        for msg in msgs:
            await _handle_one(bus, spec, model, handler, msg)


async def _handle_one(bus: Bus, spec: subjects.ConsumerSpec, model: type[M],
                      handler: Callable[[M, Delivery], Awaitable[None]], msg: Msg) -> None:
    meta = msg.metadata
    delivery = Delivery(subject=msg.subject, num_delivered=meta.num_delivered, stream_seq=meta.sequence.stream)
    dlq_id = f"{spec.stream.name}.{spec.durable}.{meta.sequence.stream}"
    with telemetry.consumer_span(f"{spec.durable} {model.__name__}", msg.headers, msg.subject) as span:
        outcome = await _outcome(bus, spec, model, handler, msg, delivery, dlq_id)
        span.set_attribute("relaunch.outcome", outcome)
    CONSUMED.labels(bus.service, spec.durable, outcome).inc()


async def _outcome(bus: Bus, spec: subjects.ConsumerSpec, model: type[M],
                   handler: Callable[[M, Delivery], Awaitable[None]], msg: Msg, delivery: Delivery,
                   dlq_id: str) -> str:
    """Run the handler and acknowledge as the module says; returns the outcome for metrics."""
    meta = msg.metadata
    outcome = "ack"
    try:
        try:
            body = model.model_validate_json(msg.data)
        except ValidationError as exc:
            raise PermanentError(f"not a valid {model.__name__}: {_short(exc)}") from exc
        await handler(body, delivery)
        await msg.ack()
    except TemporaryError as exc:
        outcome = "nak"
        log.debug("%s: look again in %.1fs: %s", spec.durable, exc.delay, exc)
        await msg.nak(delay=exc.delay)
    except PermanentError as exc:
        outcome = "dlq"
        log.warning("%s: dead-lettering message on %s: %s", spec.durable, msg.subject, exc)
        await bus.dead_letter(msg.subject, str(exc), msg.data, dlq_id)
        DEAD_LETTERS.labels(bus.service, spec.durable).inc()
        await msg.term()
    except Exception as exc:  # a bug or an outage we did not classify: never lose the message
        last = spec.max_deliver if spec.max_deliver > 0 else BUG_DELIVERIES
        if meta.num_delivered >= last:
            outcome = "dlq"
            log.exception("%s: giving up on message after %d deliveries", spec.durable, meta.num_delivered)
            await bus.dead_letter(msg.subject, f"handler kept failing: {type(exc).__name__}: {exc}",
                                  msg.data, dlq_id)
            DEAD_LETTERS.labels(bus.service, spec.durable).inc()
            await msg.term()
        else:
            outcome = "error"
            log.exception("%s: handler failed (delivery %d); retrying", spec.durable, meta.num_delivered)
            await msg.nak(delay=min(2.0 ** meta.num_delivered * 0.25, 30.0))
    return outcome


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<body>'}: {e['msg']}" for e in exc.errors()[:5])
