"""One service's connection to NATS: a FastStream `NatsBroker` (its subscribers, the outcome
middleware) and the JetStream calls relaunch makes on the same connection (publish with a Msg-Id and
trace context, dead letters, the last message of a subject). No service module touches `nats` itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl

import nats.errors
import nats.js.errors
from faststream.nats import NatsBroker, NatsRouter
from faststream.security import BaseSecurity
from faststream.nats.security import NatsSecurity, NatsUserPassword
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from . import natsauth, subjects, telemetry
from .subject_filters import within
from .errors import TemporaryError
from .outcomes import OutcomeMiddleware
from .clock import utcnow
from .schemas import DeadLetter, Message, dump
from .settings import CommonSettings, SettingsError, nats_servers
from .streams import ensure_streams

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 8.0
"""Longest one connection attempt may take, TLS handshake and first JetStream round trip included."""
PUBLISH_TIMEOUT_S = 5.0
"""Longest a durable publication waits for its PubAck (nats-py's JetStream default)."""
DLQ_PAYLOAD_KEEP = 64 * 1024
"""How much of a rejected body the DLQ entry keeps (the size is recorded whole)."""


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


class SupervisorNoise(logging.Filter):
    """Keeps two of FastStream's supervisor lines (faststream 0.7.8 with nats-py 2.16.0) out of every
    service's log:
    - "callback for Task-N is being executed...", at INFO each time one of its tasks ends;
    - "Task-N raised an exception, retrying..." with a traceback, for a pull subscriber's fetch that
      ran out of time: nats-py raises the built-in TimeoutError there, FastStream suppresses only
      nats.errors.TimeoutError, and its supervisor starts the fetch loop again (nothing is lost: the
      fetch had nothing). Any other exception is still logged, traceback and all."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if message.startswith("callback for ") and message.endswith(" is being executed..."):
            return False
        if "raised an exception, retrying" in message and record.exc_info \
                and type(record.exc_info[1]) is TimeoutError:  # noqa: E721 - exactly the built-in one
            return False
        return True


_FASTSTREAM_LOG = logging.getLogger("relaunch.faststream")
_FASTSTREAM_LOG.addFilter(SupervisorNoise())


def broker_for(url: str, service: str, options: dict, outcomes: OutcomeMiddleware | None = None) -> NatsBroker:
    """A NatsBroker with `connect_options()`'s user, password, TLS and private inbox prefix."""
    security: BaseSecurity | None = None
    tls = options.get("tls")
    if options.get("user"):
        security = NatsUserPassword(options["user"], options.get("password", ""), ssl_context=tls)
    elif tls is not None:
        security = NatsSecurity(ssl_context=tls)
    extra = {k: v for k, v in options.items() if k not in ("user", "password", "tls")}
    return NatsBroker(
        nats_servers(url), name=f"relaunch-{service}", connect_timeout=2, allow_reconnect=True, max_reconnect_attempts=-1,
        reconnect_time_wait=0.5, security=security, middlewares=[outcomes] if outcomes else (),
        # FastStream logs every message at its log level ("Received", "Processed"): debug only.
        logger=_FASTSTREAM_LOG, log_level=logging.DEBUG, graceful_timeout=5.0, **extra,
    )


class Bus:
    """One service's broker and its JetStream context."""

    def __init__(self, broker: NatsBroker, service: str, outcomes: OutcomeMiddleware, inbox: str) -> None:
        self.broker, self.service, self.outcomes = broker, service, outcomes
        self.inbox_prefix = inbox
        """This user's reply-inbox prefix (natsauth.inbox_prefix): pull subscriptions get replies under it."""
        self.nc: NATS = broker.connection

    @functools.cached_property
    def js(self) -> JetStreamContext:
        """The JetStream context of the broker's connection (made at first use: a broker in
        FastStream's TestNatsBroker has no real connection, and publishing does not need it)."""
        return self.nc.jetstream()

    @classmethod
    async def connect(cls, url: str, service: str, *, wait_s: float = 60.0, options: dict | None = None) -> Bus:
        """Connect, retrying while the server is not up yet (a service may start before NATS).

        `options`: extra `nats.connect` arguments; by default `connect_options()` (user, TLS from the
        RELAUNCH_NATS_* settings)."""
        options = connect_options() if options is None else options
        deadline = asyncio.get_running_loop().time() + wait_s
        delay = 0.1
        while True:
            outcomes = OutcomeMiddleware()
            broker = broker_for(url, service, options, outcomes)
            try:
                # Bounded as a whole: a failed TLS handshake (a wrong CA) would otherwise hang here.
                await asyncio.wait_for(broker.connect(), timeout=CONNECT_TIMEOUT_S)
                bus = cls(broker, service, outcomes, options.get("inbox_prefix", "_INBOX"))
                outcomes.bus = bus
                await ensure_streams(bus.js, service, CommonSettings().nats_replicas)
                return bus
            # ServiceUnavailable: a cluster's JetStream has no meta leader yet (servers starting, or one
            # lost a moment ago and the others electing): temporary like a server not up yet.
            except (OSError, TimeoutError, nats.errors.NoServersError, nats.errors.TimeoutError,
                    nats.js.errors.ServiceUnavailableError) as exc:
                await _close_quietly(broker)
                if asyncio.get_running_loop().time() > deadline:
                    raise TemporaryError(f"NATS at {url} is not reachable: {exc}") from exc
                log.warning("waiting for NATS at %s: %s", url, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            except BaseException:
                await _close_quietly(broker)
                raise

    @property
    def connected(self) -> bool:
        return self.nc.is_connected

    async def serve(self, *routers: NatsRouter) -> None:
        """Include the service's routers and start their subscribers (on this connection)."""
        for router in routers:
            self.broker.include_router(router)
        await self.broker.start()
        await self.nc.flush()  # the server knows every core subscription from here on (a request finds it)

    async def publish(self, subject: str, model: Message, msg_id: str | None = None,
                      traceparent: str | None = None) -> bool:
        """Publish durably with the current trace context (or `traceparent`, for an outbox row);
        returns False when JetStream recognised `msg_id` as a duplicate."""
        return await self.publish_bytes(subject, dump(model), msg_id, traceparent)

    async def publish_bytes(self, subject: str, payload: bytes, msg_id: str | None = None,
                            traceparent: str | None = None) -> bool:
        """`publish` for a body already encoded (an outbox row)."""
        headers = {subjects.MSG_ID_HEADER: msg_id} if msg_id else {}
        if traceparent:
            headers[telemetry.TRACEPARENT] = traceparent
        else:
            telemetry.inject(headers)
        # Through the broker (FastStream's JetStream producer; in TestNatsBroker, to the subscribers in
        # memory), naming the stream: the PubAck says it is stored, and whether it was a duplicate.
        try:
            ack = await self.broker.publish(payload, subject, headers=headers, stream=stream_of(subject).name,
                                            timeout=PUBLISH_TIMEOUT_S)
        except (nats.errors.Error, TimeoutError) as exc:
            # Not stored: NATS unreachable, or the stream without a leader for a moment (a cluster
            # electing one after a server died answers nothing, or "no responders"). Temporary: the
            # caller's loop goes on and a handler's message is redelivered with back-off.
            raise TemporaryError(f"NATS did not store the message on {subject}: {type(exc).__name__}: {exc}",
                                 delay=0.5, backoff=True) from exc
        return ack is None or not ack.duplicate  # None: in memory (TestNatsBroker), nothing is deduplicated

    async def dead_letter(self, subject: str, reason: str, data: bytes, msg_id: str | None) -> None:
        letter = DeadLetter(
            service=self.service, subject=subject, reason=reason[:2000],
            payload=data[:DLQ_PAYLOAD_KEEP].decode("utf-8", "replace"), payload_bytes=len(data), at=utcnow(),
        )
        await self.publish(subjects.dlq(self.service), letter, msg_id=msg_id)

    async def last_message(self, stream: subjects.StreamSpec, subject: str) -> tuple[bytes, int] | None:
        """The body and stream sequence of the newest message on `subject`, None when there is none.
        Raises TemporaryError when NATS cannot say."""
        try:
            msg = await self.js.get_last_msg(stream.name, subject)
        except nats.js.errors.NotFoundError:
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise TemporaryError(f"cannot read the last message on {subject}: {exc}", backoff=True) from exc
        return msg.data or b"", msg.seq or 0

    async def stream_subjects(self, stream: subjects.StreamSpec, pattern: str) -> list[str]:
        """The subjects matching `pattern` that `stream` holds messages on now."""
        try:
            info = await self.js.stream_info(stream.name, subjects_filter=pattern)
        except (nats.errors.Error, TimeoutError) as exc:
            raise TemporaryError(f"cannot list the subjects of {stream.name}: {exc}") from exc
        return sorted(info.state.subjects or {})

    async def close(self) -> None:
        """Stop the subscribers, flush what was published, then close. Not `drain()`: by now the
        consuming tasks are cancelled, so a pull subscription's pending queue never empties and drain
        would wait out its timeout on every stop; unacked messages are redelivered to the next replica."""
        try:
            await asyncio.wait_for(_stop_subscribers(self.broker), timeout=5.0)
        except (Exception, TimeoutError) as exc:  # noqa: BLE001 - closing anyway
            log.debug("stopping subscribers: %s", exc)
        if not self.nc.is_closed:
            try:
                await self.nc.flush(timeout=2)
            except (TimeoutError, nats.errors.Error):
                pass
            await self.nc.close()


@functools.lru_cache(maxsize=4096)
def stream_of(subject: str) -> subjects.StreamSpec:
    """The stream that stores `subject` (every subject relaunch publishes durably has one)."""
    for spec in subjects.STREAMS:
        if any(within(subject, pattern) for pattern in spec.subjects):
            return spec
    raise ValueError(f"no stream stores {subject}: it cannot be published durably")


async def _stop_subscribers(broker: NatsBroker) -> None:
    for sub in broker.subscribers:
        await sub.stop()


async def _close_quietly(broker: NatsBroker) -> None:
    try:
        nc = broker.connection
    except Exception:  # noqa: BLE001 - never connected
        return
    if nc is not None and not nc.is_closed:
        await nc.close()
