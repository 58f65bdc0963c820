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
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import NamedTuple, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from prometheus_client import Counter
from pydantic import ValidationError

from . import natsauth, subjects, telemetry
from .errors import PermanentError, TemporaryError
from .schemas import DeadLetter, Message, dump
from .settings import CommonSettings, SettingsError

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

CONSUMED = Counter(
    "relaunch_messages_consumed_total", "Messages taken from a durable consumer, by outcome",
    ["service", "consumer", "outcome"],
)
DEAD_LETTERS = Counter("relaunch_dead_letters_total", "Messages sent to the DLQ", ["service", "consumer"])

CONNECT_TIMEOUT_S = 8.0
"""Longest one connection attempt may take, TLS handshake and first JetStream round trip included."""
MAX_BODY_BYTES = 1024 * 1024
"""A body larger than this is dead-lettered unparsed (NATS' default max_payload; a server configured
with a larger one does not make the services parse more)."""
DLQ_PAYLOAD_KEEP = 64 * 1024
"""How much of a rejected body the DLQ entry keeps (the size is recorded whole)."""
BUG_DELIVERIES = 20
"""Deliveries after which a message whose handler keeps raising an unexpected error is dead-lettered,
for consumers with unbounded max_deliver."""


class Delivery(NamedTuple):
    """What a handler may know about the message besides its body. (A NamedTuple: one is made for every
    message, and a frozen dataclass costs four times as much to make.)"""

    subject: str
    num_delivered: int
    stream_seq: int


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def connect_options(settings: CommonSettings | None = None) -> dict:
    """Keyword arguments for `nats.connect` from the RELAUNCH_NATS_* settings: the user, its password
    read from its file (never from argv or the environment), its private reply inbox, and TLS."""
    s = settings if settings is not None else CommonSettings()
    options: dict = {}
    if s.nats_password_file and not s.nats_user:
        raise SettingsError("RELAUNCH_NATS_PASSWORD_FILE is set but RELAUNCH_NATS_USER is not: set both")
    if s.nats_user:
        options["user"] = s.nats_user
        options["inbox_prefix"] = natsauth.inbox_prefix(s.nats_user)
        if s.nats_password_file:
            try:
                options["password"] = natsauth.read_password(s.nats_password_file)
            except (OSError, ValueError) as exc:
                raise SettingsError(f"cannot read RELAUNCH_NATS_PASSWORD_FILE: {exc}") from exc
    if s.nats_tls_ca or s.nats_tls_cert:
        if bool(s.nats_tls_cert) != bool(s.nats_tls_key):
            raise SettingsError("RELAUNCH_NATS_TLS_CERT and RELAUNCH_NATS_TLS_KEY go together: set both or neither")
        try:
            context = ssl.create_default_context(cafile=s.nats_tls_ca or None)
            if s.nats_tls_cert:
                context.load_cert_chain(s.nats_tls_cert, s.nats_tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(f"cannot load the NATS TLS files (RELAUNCH_NATS_TLS_*): {exc}") from exc
        options["tls"] = context
    return options


class Bus:
    """One NATS connection with JetStream, for one service."""

    def __init__(self, nc: NATS, service: str) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.service = service

    @classmethod
    async def connect(cls, url: str, service: str, *, wait_s: float = 60.0, options: dict | None = None) -> Bus:
        """Connect, retrying while the server is not up yet (a service may start before NATS).

        `options`: extra `nats.connect` arguments; by default `connect_options()` (user, TLS from the
        RELAUNCH_NATS_* settings)."""
        options = connect_options() if options is None else options
        deadline = asyncio.get_running_loop().time() + wait_s
        delay = 0.1
        while True:
            try:
                # Bounded as a whole: a failed TLS handshake (a wrong CA) would otherwise hang here.
                nc = await asyncio.wait_for(nats.connect(
                    url, name=f"relaunch-{service}", connect_timeout=2, allow_reconnect=True,
                    max_reconnect_attempts=-1, reconnect_time_wait=0.5, **options,
                ), timeout=CONNECT_TIMEOUT_S)
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
        """Create or update every stream in `subjects.STREAMS` that is missing or differs (idempotent,
        safe to race). With NATS permissions on, only the admin user may create or change a stream
        (natsauth): a service then finds them made by the setup step and only reads their settings."""
        for spec in subjects.STREAMS:
            config = StreamConfig(
                name=spec.name, subjects=list(spec.subjects), max_age=spec.max_age_s,
                duplicate_window=spec.duplicate_window_s, storage=StorageType.FILE,
                max_msgs_per_subject=spec.max_msgs_per_subject,
            )
            try:
                have = (await self.js.stream_info(spec.name)).config
            except nats.js.errors.NotFoundError:
                have = None
            if have is not None and _same_stream(have, config):
                continue
            try:
                if have is None:
                    try:
                        await self.js.add_stream(config)
                    except nats.js.errors.BadRequestError:  # created meanwhile with other settings
                        await self.js.update_stream(config)
                else:
                    await self.js.update_stream(config)
            except nats.errors.TimeoutError as exc:  # a permissions violation is never answered
                if have is not None:
                    log.warning("stream %s differs from this release's settings and %s may not change it: "
                                "run `python -m relaunch.common.natsauth setup` as admin", spec.name, self.service)
                    continue
                raise TemporaryError(
                    f"stream {spec.name} does not exist and NATS user of {self.service} may not create it: "
                    "run `python -m relaunch.common.natsauth setup` as admin (scripts/stack.sh does)") from exc

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
        """Flush what was published, then close. Not `drain()`: by now the consuming tasks are
        cancelled, so a pull subscription's pending queue never empties and drain would wait out its
        timeout on every stop; unacked messages are redelivered to the next replica anyway."""
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=2)
            except (TimeoutError, nats.errors.Error):
                pass
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
    per_subject: bool = False,
) -> None:
    """Pull from a durable consumer until `stop` is set, mapping outcomes as the module says.

    `active`: when given and false (a standby without the lease), nothing is fetched.
    `per_subject`: the messages of one fetch are handled concurrently, those on one subject one after
    another in stream order. Every relaunch subject names one job, so each job's messages keep their
    order while a handler that mostly waits on Redis, Postgres or NATS serves many jobs at once (1,000
    failures at once must not queue behind each other's round trips). Only for handlers that are safe
    to run for different jobs at the same time.
    """
    sub = await _bind(bus, spec, stop)
    while sub is not None and not stop.is_set():
        msgs = await _fetch(sub, spec, batch, active)
        if not per_subject or len(msgs) < 2:
            for msg in msgs:
                await _handle_one(bus, spec, model, handler, msg)
            continue
        lanes: dict[str, list[Msg]] = {}
        for msg in msgs:
            lanes.setdefault(msg.subject, []).append(msg)

        async def lane(msgs: list[Msg]) -> None:
            for msg in msgs:
                await _handle_one(bus, spec, model, handler, msg)

        async with asyncio.TaskGroup() as group:  # cancels the other lanes if one fails or we are stopped
            for msgs in lanes.values():
                group.create_task(lane(msgs))


async def consume_batch(
    bus: Bus,
    spec: subjects.ConsumerSpec,
    model: type[M],
    handler: Callable[[list[tuple[M, Delivery]]], Awaitable[list[Exception | None]]],
    stop: asyncio.Event,
    *,
    batch: int = 256,
    active: Callable[[], bool] | None = None,
    concurrency: int = 1,
) -> None:
    """`consume` for a handler that does better with many messages at once (one round trip to its
    store for all of them, as the detector's progress tracking does at thousands of messages a second).

    The handler gets the messages of one fetch whose bodies parse, in stream order, and returns one
    result per message: None (ack) or the exception that message met, mapped onto ack/nak/DLQ exactly
    as `consume` maps a raised one; an exception the handler raises applies to every message of the
    batch. Bodies that do not parse are dead-lettered one by one. One span per batch.

    `concurrency`: how many batches may be in the handler at once (the next is fetched and handled
    while the last waits on its store). Above 1 only for a handler that keeps each subject's batches in
    order itself (the detector's progress tracking waits for a job's earlier batch).

    Messages are pulled with BatchPuller rather than nats-py's fetch (which waits for each message of
    a batch with a task and a timer of its own: at 10,000 messages a second that was a fifth of the
    detector's work).
    """
    if await _bind(bus, spec, stop, subscribe=False) is None:
        return
    puller = await BatchPuller(bus, spec).start()
    consumed = {outcome: CONSUMED.labels(bus.service, spec.durable, outcome)
                for outcome in ("ack", "nak", "dlq", "error")}

    async def handle(taken: list[Msg], items: list[tuple[M, Delivery]]) -> None:
        with telemetry.consumer_span(f"{spec.durable} {model.__name__} batch", None, spec.filter_subject) as span:
            span.set_attribute("messaging.batch.message_count", len(items))
            try:
                results = list(await handler(items))
                if len(results) != len(items):
                    raise RuntimeError(f"batch handler returned {len(results)} results for {len(items)} messages")
            except Exception as exc:  # noqa: BLE001 - mapped per message below, as consume() does
                results = [exc] * len(items)
            acked = 0
            for msg, result in zip(taken, results):
                try:
                    if result is not None:
                        raise result
                    await msg.ack()
                    acked += 1
                except Exception as exc:  # noqa: BLE001 - every kind is mapped by _settle
                    consumed[await _settle(bus, spec, msg, exc)].inc()
            if acked:
                consumed["ack"].inc(acked)

    running: deque[asyncio.Task] = deque()
    try:
        while not stop.is_set():
            if active is not None and not active():
                await asyncio.sleep(0.2)
                continue
            msgs = await puller.fetch(batch, 0.5)
            if not msgs:
                continue
            if len(msgs) == batch:  # more may be waiting: let them come while this batch is handled
                await puller.prefetch(batch)
            taken: list[Msg] = []
            items: list[tuple[M, Delivery]] = []
            for msg in msgs:
                try:
                    body = parse_body(model, msg.data)
                except PermanentError as exc:
                    consumed[await _settle(bus, spec, msg, exc)].inc()
                    continue
                taken.append(msg)
                items.append((body, _delivery(msg)))
            if not items:
                continue
            running.append(asyncio.create_task(handle(taken, items)))
            while len(running) >= max(1, concurrency):
                await running.popleft()
        while running:
            await running.popleft()
    finally:
        for task in running:  # only when cancelled or failed: their messages are redelivered
            task.cancel()
        await puller.close()


class BatchPuller:
    """Pull requests on a durable consumer made and answered on one inbox of our own (JetStream's pull
    protocol: a request on $JS.API.CONSUMER.MSG.NEXT.<stream>.<durable> names the batch; the messages
    come to the request's reply subject, and a status message (404 none left, 408 expired) ends a
    request early). Messages land in a list from the subscription's callback, with no task or timer
    per message.

    fetch(n, timeout): what is there now (a no-wait request), or else what comes first within
    `timeout` (a waiting request). A waiting request outlives the fetch that made it when it came back
    with fewer messages than it asked for: what it delivers later is handed out by the next fetch
    (delivered messages are acknowledged or, if this process dies, redelivered after ack_wait, as ever).
    """

    def __init__(self, bus: Bus, spec: subjects.ConsumerSpec) -> None:
        self.nc, self.spec = bus.nc, spec
        prefix = getattr(bus.js, "_prefix", None) or "$JS.API"
        self.next_subject = f"{prefix}.CONSUMER.MSG.NEXT.{spec.stream.name}.{spec.durable}"
        self._buffer: list[Msg] = []
        self._want = 1
        self._woken = asyncio.Event()
        self._sub = None
        self.problem: str | None = None
        """The last status other than 404/408/100 (a deleted consumer, too many waiting requests...)."""

    async def start(self) -> BatchPuller:
        self.inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(self.inbox, cb=self._on_msg, pending_msgs_limit=-1,
                                            pending_bytes_limit=-1)
        return self

    async def close(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except nats.errors.Error:
                pass
            self._sub = None

    async def _on_msg(self, msg: Msg) -> None:
        headers = msg.headers
        if headers and not msg.data and (status := headers.get("Status")):
            if status == "100":
                return  # an idle heartbeat (not asked for)
            if status not in ("404", "408"):
                self.problem = f"{status} {headers.get('Description', '')}".strip()
            self._woken.set()
            return
        self._buffer.append(msg)
        if len(self._buffer) >= self._want:
            self._woken.set()

    def _take(self, batch: int) -> list[Msg]:
        msgs, self._buffer = self._buffer[:batch], self._buffer[batch:]
        return msgs

    async def _request(self, body: bytes, want: int, timeout: float) -> None:
        self._want = want
        self._woken.clear()
        try:
            await self.nc.publish(self.next_subject, body, reply=self.inbox)
        except nats.errors.Error as exc:
            log.warning("%s: pull request failed (%s); retrying", self.spec.durable, exc)
            await asyncio.sleep(timeout)
            return
        try:
            await asyncio.wait_for(self._woken.wait(), timeout)
        except TimeoutError:
            pass

    async def prefetch(self, batch: int) -> None:
        """Ask for the next batch now, without waiting for it (the next fetch hands it out)."""
        try:
            await self.nc.publish(self.next_subject, b'{"batch":%d,"no_wait":true}' % batch, reply=self.inbox)
        except nats.errors.Error:
            pass  # fetch asks again

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        if self._buffer:
            return self._take(batch)
        await self._request(b'{"batch":%d,"no_wait":true}' % batch, batch, timeout)
        if not self._buffer:
            if self.problem:
                log.warning("%s: %s", self.spec.durable, self.problem)
                self.problem = None
                await asyncio.sleep(timeout)
                return []
            expires = int(timeout * 1e9) - 100_000
            await self._request(b'{"batch":%d,"expires":%d}' % (batch, expires), 1, timeout)
        return self._take(batch)


def _delivery(msg: Msg) -> Delivery:
    """The message's Delivery, read off its reply subject ($JS.ACK.<stream>.<consumer>.<delivered>.
    <stream seq>.<consumer seq>.<time>.<pending>): msg.metadata parses all of it, dates too."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return Delivery(subject=msg.subject, num_delivered=int(tokens[4]), stream_seq=int(tokens[5]))
    meta = msg.metadata  # the longer form, with a domain and an account hash
    return Delivery(subject=msg.subject, num_delivered=meta.num_delivered, stream_seq=meta.sequence.stream)


async def handled_until(bus: Bus, spec: subjects.ConsumerSpec, now: float) -> float:
    """Epoch seconds before which every message on `spec`'s durable has been handled (acked):
    `now` when nothing is pending, else the publish time of the first message on the consumer's
    subjects after its ack floor.

    A judgement about silence (a hang) is sound only up to this time: a detector that is behind must
    not take progress it has not read yet for no progress. Raises TemporaryError when NATS cannot say.
    """
    try:
        info = await bus.js.consumer_info(spec.stream.name, spec.durable)
        if not info.num_pending and not info.num_ack_pending:
            return now
        first = await bus.js.get_msg(spec.stream.name, seq=(info.ack_floor.stream_seq or 0) + 1,
                                     subject=spec.filter_subject, next=True)
    except nats.js.errors.NotFoundError:
        return now  # no such consumer yet, or nothing after the floor any more
    except (nats.errors.Error, TimeoutError) as exc:
        raise TemporaryError(f"cannot read {spec.durable}'s position: {exc}") from exc
    stamp = first.time
    if stamp is None:
        return now
    return min(now, stamp.timestamp())


async def _bind(bus: Bus, spec: subjects.ConsumerSpec, stop: asyncio.Event, subscribe: bool = True):
    """The pull subscription on `spec`'s durable, created or updated first; None when stopped meanwhile.
    `subscribe` False: only create or update the durable (True once done), for BatchPuller's own pulls."""
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
            if not subscribe:
                return True
            return await bus.js.pull_subscribe_bind(spec.durable, stream=spec.stream.name)
        except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError, nats.js.errors.APIError) as exc:
            log.warning("%s: cannot bind consumer yet: %s", spec.durable, exc)
            await asyncio.sleep(1.0)
    return None


async def _fetch(sub, spec: subjects.ConsumerSpec, batch: int, active: Callable[[], bool] | None) -> list[Msg]:
    """Up to `batch` messages (what is there now, or the first to come within 0.5 s); [] otherwise."""
    if active is not None and not active():
        await asyncio.sleep(0.2)
        return []
    try:
        return await sub.fetch(batch, timeout=0.5)
    except (nats.errors.TimeoutError, TimeoutError):
        return []
    except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
            nats.js.errors.APIError, nats.errors.Error) as exc:
        log.warning("%s: fetch failed (%s); retrying", spec.durable, exc)
        await asyncio.sleep(0.5)
        return []


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
    try:
        body = parse_body(model, msg.data)
        await handler(body, delivery)
        await msg.ack()
    except Exception as exc:  # noqa: BLE001 - every kind is mapped by _settle
        return await _settle(bus, spec, msg, exc, dlq_id)
    return "ack"


async def _settle(bus: Bus, spec: subjects.ConsumerSpec, msg: Msg, exc: Exception, dlq_id: str | None = None) -> str:
    """Nak, dead-letter or retry a message whose handling met `exc`; returns the outcome for metrics."""
    meta = msg.metadata
    dlq_id = dlq_id or f"{spec.stream.name}.{spec.durable}.{meta.sequence.stream}"
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


def _same_stream(have: StreamConfig, want: StreamConfig) -> bool:
    return (sorted(have.subjects or []) == sorted(want.subjects or []) and have.storage == want.storage
            and abs((have.max_age or 0) - (want.max_age or 0)) < 1e-3
            and abs((have.duplicate_window or 0) - (want.duplicate_window or 0)) < 1e-3
            and (have.max_msgs_per_subject or -1) == (want.max_msgs_per_subject or -1))


def parse_body(model: type[M], data: bytes) -> M:
    """The message `data` holds, or PermanentError saying why it is none (oversized, not JSON, wrong
    schema version, unknown field, wrong type): what every consumer dead-letters."""
    if len(data) > MAX_BODY_BYTES:
        raise PermanentError(f"oversized: {len(data)} bytes > {MAX_BODY_BYTES}, not parsed")
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise PermanentError(f"not a valid {model.__name__}: {_short(exc)}") from exc


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<body>'}: {e['msg']}" for e in exc.errors()[:5])
