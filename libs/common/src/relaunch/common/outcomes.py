"""How a handler's outcome becomes an acknowledgement: written once, used by every consumer (the
FastStream subscribers through `OutcomeMiddleware`, the ingest engine through `settle`).
docs/architecture.md, "Errors":

  handler returns         -> ack
  TemporaryError(delay)   -> nak(delay)                       (look again later; on the consumer's last
                                                               allowed delivery: DLQ entry, then term())
  PermanentError, or a body that does not validate -> DLQ entry with the reason, then term()
  any other exception     -> nak with back-off; dead-lettered on its last allowed delivery

FastStream's own ack policy would term() a message whose handler raised something unexpected (and
lose it): relaunch's subscribers run with `AckPolicy.MANUAL`, and this middleware settles them.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from faststream import BaseMiddleware
from nats.aio.msg import Msg
from prometheus_client import Counter

from . import subjects, telemetry
from .errors import PermanentError, TemporaryError
from .lanes import KeyedLanes, Turn

if TYPE_CHECKING:
    from .consumers import Consumer


class Bus(Protocol):
    """What settling a message needs of the connection (connection.Bus fills it; named here, not imported, so
    that connection.py, which installs this module's middleware, and this module sit on two floors)."""

    service: str

    async def dead_letter(self, subject: str, reason: str, data: bytes, msg_id: str | None) -> None: ...

log = logging.getLogger(__name__)

CONSUMED = Counter(
    "relaunch_messages_consumed_total", "Messages taken from a durable consumer, by outcome",
    ["service", "consumer", "outcome"],
)
DEAD_LETTERS = Counter("relaunch_dead_letters_total", "Messages sent to the DLQ", ["service", "consumer"])

BUG_DELIVERIES = 20
"""Deliveries after which a message whose handler keeps raising an unexpected error is dead-lettered,
for consumers with unbounded max_deliver."""


class Delivery(NamedTuple):
    """What a handler may know about the message besides its body. (A NamedTuple: one is made for every
    message, and a frozen dataclass costs four times as much to make.)"""

    subject: str
    num_delivered: int
    stream_seq: int


def delivery_of(msg: Msg) -> Delivery:
    """The message's Delivery, read off its reply subject ($JS.ACK.<stream>.<consumer>.<delivered>.
    <stream seq>.<consumer seq>.<time>.<pending>): msg.metadata parses all of it, dates too."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return Delivery(subject=msg.subject, num_delivered=int(tokens[4]), stream_seq=int(tokens[5]))
    meta = msg.metadata  # the longer form, with a domain and an account hash
    return Delivery(subject=msg.subject, num_delivered=meta.num_delivered, stream_seq=meta.sequence.stream)


class LazyDelivery:
    """A pulled message's Delivery, read off its reply subject only when a handler asks for a count or a
    sequence (most progress reports are handled without either: delivery_of for each had cost the
    detector's ingest a thirtieth of its CPU). The same attributes as a Delivery."""

    __slots__ = ("_msg", "_read")

    def __init__(self, msg: Msg) -> None:
        self._msg, self._read = msg, None

    @property
    def subject(self) -> str:
        return self._msg.subject

    @property
    def num_delivered(self) -> int:
        return self._delivery().num_delivered

    @property
    def stream_seq(self) -> int:
        return self._delivery().stream_seq

    def _delivery(self) -> Delivery:
        read = self._read
        if read is None:
            read = self._read = delivery_of(self._msg)
        return read

    def __repr__(self) -> str:
        return repr(self._delivery())


async def ack_many(msgs: list[Msg]) -> None:
    """Acknowledge JetStream messages, all in one write: what msg.ack() does for each (an empty PUB to its
    reply subject, $JS.ACK...), without a publish call per message, which cost the progress ingest a
    tenth of its CPU at thousands of messages a second. While the connection is not up (or a message has
    no reply subject) they are acknowledged one by one, which raises as publish does."""
    if not msgs:
        return
    nc = msgs[0]._client
    if not nc.is_connected or nc.is_draining_pubs or not all(m.reply and m._client is nc for m in msgs):
        for msg in msgs:
            await msg.ack()
        return
    # nats-py's own write path (pinned in constraints.txt; tests/integration/test_bus_concurrency.py
    # checks that every message is acknowledged and none comes back)
    await nc._send_command(b"".join(b"PUB %s 0\r\n\r\n" % m.reply.encode() for m in msgs))
    await nc._flush_pending()
    for msg in msgs:
        msg._ackd = True


def durable_of(msg: Msg) -> str | None:
    """The durable consumer that delivered `msg` ($JS.ACK.<stream>.<durable>...), None for a core message."""
    reply = msg.reply
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    return tokens[3] if len(tokens) == 9 else tokens[5] if len(tokens) >= 12 else None


async def settle(bus: Bus, spec: subjects.ConsumerSpec, msg: Msg, exc: Exception) -> str:
    """Nak, dead-letter or retry a message whose handling met `exc`; returns the outcome for metrics."""
    meta = msg.metadata
    dlq_id = f"{spec.stream.name}.{spec.durable}.{meta.sequence.stream}"
    if isinstance(exc, TemporaryError) and 0 < spec.max_deliver <= meta.num_delivered:
        # NATS would not deliver it again: kept in the DLQ with the reason instead of silently dropped.
        log.warning("%s: still not handled after %d deliveries, dead-lettering: %s", spec.durable,
                    meta.num_delivered, exc)
        await bus.dead_letter(msg.subject, f"still temporary after {meta.num_delivered} deliveries (the "
                                           f"consumer's max_deliver): {exc}", msg.data, dlq_id)
        DEAD_LETTERS.labels(bus.service, spec.durable).inc()
        await msg.term()
        return "dlq"
    if isinstance(exc, TemporaryError):
        delay = exc.delay_for(meta.num_delivered)
        log.debug("%s: look again in %.1fs: %s", spec.durable, delay, exc)
        await msg.nak(delay=delay)
        return "nak"
    if isinstance(exc, PermanentError):
        log.warning("%s: dead-lettering message on %s: %s", spec.durable, msg.subject, exc)
        await bus.dead_letter(msg.subject, str(exc), msg.data, dlq_id)
        DEAD_LETTERS.labels(bus.service, spec.durable).inc()
        await msg.term()
        return "dlq"
    # A bug or an outage we did not classify: never lose the message.
    last = spec.max_deliver if spec.max_deliver > 0 else BUG_DELIVERIES
    if meta.num_delivered >= last:
        log.error("%s: giving up on message after %d deliveries", spec.durable, meta.num_delivered, exc_info=exc)
        await bus.dead_letter(msg.subject, f"handler kept failing: {type(exc).__name__}: {exc}", msg.data, dlq_id)
        DEAD_LETTERS.labels(bus.service, spec.durable).inc()
        await msg.term()
        return "dlq"
    log.error("%s: handler failed (delivery %d); retrying", spec.durable, meta.num_delivered, exc_info=exc)
    await msg.nak(delay=min(2.0 ** meta.num_delivered * 0.25, 30.0))
    return "error"


_CURRENT: contextvars.ContextVar[Msg | None] = contextvars.ContextVar("relaunch_current_message", default=None)


def current_message() -> Msg:
    """The JetStream message whose handler is running (set by OutcomeMiddleware for its task).

    Handlers ask for it here rather than declare `msg: NatsMessage`: FastStream resolves an injected
    message through a synchronous dependency, which fast_depends runs in a worker thread, a thread
    hop per message (seen in the decider's profile under 1,000 failures at once)."""
    msg = _CURRENT.get()
    if msg is None:
        raise RuntimeError("no JetStream message is being handled here (OutcomeMiddleware not installed?)")
    return msg


class OutcomeMiddleware:
    """The broker middleware of every relaunch service (`Bus.connect` installs it). It knows each
    declared consumer by durable name (`register`), and for each message of one:
    - takes the message's turn in the consumer's lanes when the message arrives (one job's messages
      one after another in stream order, different jobs' at once; or all in order, as declared),
    - runs the handler inside a consumer span that continues the publisher's trace,
    - settles the message as the module says and counts the outcome.
    Messages of anything else (a core request, an ordered consumer's push) pass through untouched."""

    def __init__(self, bus: Bus | None = None) -> None:
        self.bus = bus  # set by Bus.connect once the connection is up
        self.consumers: dict[str, tuple[Consumer, KeyedLanes]] = {}

    def register(self, consumer: Consumer) -> None:
        self.consumers[consumer.spec.durable] = (consumer, KeyedLanes())

    def __call__(self, msg: Any, /, *, context: Any) -> BaseMiddleware:
        return _Outcome(msg, context=context, outcomes=self)


class _Outcome(BaseMiddleware):
    __slots__ = ("outcomes", "consumer", "turn", "span", "_otel", "_current")

    def __init__(self, msg: Any, /, *, context: Any, outcomes: OutcomeMiddleware) -> None:
        super().__init__(msg, context=context)
        self.outcomes = outcomes
        self.consumer: Consumer | None = None
        self.turn: Turn | None = None
        self.span: contextlib.ExitStack | None = None
        self._current: contextvars.Token | None = None
        durable = durable_of(msg) if isinstance(msg, Msg) else None
        known = outcomes.consumers.get(durable) if durable else None
        if known is not None:
            # The turn is taken here, synchronously, as FastStream starts the message's task: turns
            # are then queued in the order the fetch returned the messages (stream order).
            self.consumer, lanes = known
            self.turn = lanes.turn(msg.subject if self.consumer.per_subject else "")

    async def on_receive(self) -> None:
        if isinstance(self.msg, Msg):
            self._current = _CURRENT.set(self.msg)
        if self.turn is None:
            return
        await self.turn.wait()
        msg = self.msg
        self.span = contextlib.ExitStack()
        span = self.span.enter_context(telemetry.consumer_span(
            f"{self.consumer.spec.durable} {self.consumer.model.__name__}", msg.headers, msg.subject))
        self._otel = span

    async def after_processed(self, exc_type=None, exc_val=None, exc_tb=None) -> bool | None:
        if self._current is not None:
            _CURRENT.reset(self._current)
            self._current = None
        if self.turn is None:
            return False
        try:
            if exc_val is not None and not isinstance(exc_val, Exception):
                return False  # cancelled (a stop): unacked, so redelivered to the next replica
            spec = self.consumer.spec
            try:
                if exc_val is None:
                    await self.msg.ack()
                    outcome = "ack"
                else:
                    outcome = await settle(self.outcomes.bus, spec, self.msg, exc_val)
            except Exception as exc:  # noqa: BLE001 - the connection went: NATS redelivers after ack_wait
                log.warning("%s: could not settle a message: %s", spec.durable, exc)
                outcome = "error"
            CONSUMED.labels(self.outcomes.bus.service, spec.durable, outcome).inc()
            if self.span is not None:
                self._otel.set_attribute("relaunch.outcome", outcome)
            return True
        finally:
            if self.span is not None:
                self.span.close()
            self.turn.leave()
