"""Running a declared consumer's FastStream subscriber on a service's broker, and the Delivery its
handler may ask for. Services declare their routers with `consumers.subscriber`; `consume` is the
same for one consumer at a time, with a switch for a standby (the actuator without its lease)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import nats.errors
from faststream.nats import NatsRouter

from . import consumers
from .connection import Bus
from .ingest import ensure_durable
from .bodies import M
from .outcomes import Delivery, current_message, delivery_of
from .periodic import every
from .schemas import Message, dump

log = logging.getLogger(__name__)


def route(router: NatsRouter, consumer: consumers.Consumer,
          handler: Callable[[M, Delivery], Awaitable[None]] | None = None, inbox_prefix: str = "_INBOX") -> None:
    """Declare `consumer` on `router`, calling `handler(body, delivery)` for each message. Without a
    handler, the declaration alone: a router for the AsyncAPI document (scripts/asyncapi.py), never
    served; the ingest engine's consumers are declared there too, though FastStream never pulls them."""
    model = consumer.model
    if handler is None:
        handler = _declared_only

    async def handle(body):
        await handler(body, delivery_of(current_message()))

    # Set here, not written in the signature: annotations are strings in this module, and FastStream
    # reads them to validate the body. The message comes from the outcome middleware, not injected
    # (outcomes.current_message says why).
    handle.__annotations__ = {"body": model, "return": None}
    handle.__name__ = handle.__qualname__ = consumer.spec.durable.replace("-", "_")
    consumers.subscriber(router, consumer, inbox_prefix, document_only=handler is _declared_only)(handle)


def answer(router: NatsRouter, declared: consumers.Responder, handler: Callable[[bytes], Message] | None = None,
           **params: str) -> None:
    """Declare the responder `declared` on `router` for the subject `params` make, answering each
    request with `handler(body)` (the raw body: an invalid one is answered too, with the reason).
    Without a handler or params, the declaration alone on the templated subject (for the document)."""
    if handler is None:
        handler = _declared_only

    async def handle(body):
        return dump(handler(body))

    handle.__annotations__ = {"body": bytes, "return": bytes}
    handle.__name__ = handle.__qualname__ = f"answer_{declared.request.__name__}"
    consumers.responder(router, declared, **params)(handle)


def _declared_only(*_args):
    raise RuntimeError("a router declared for the AsyncAPI document only is never served")


async def serve(bus: Bus, router: NatsRouter, declared: tuple[consumers.Consumer, ...]) -> None:
    """Create (or update) the declared durables, then start `router`'s subscribers on `bus`."""
    for consumer in declared:
        await ensure_durable(bus, consumer)
        bus.outcomes.register(consumer)
    await bus.serve(router)


async def consume(bus: Bus, consumer: consumers.Consumer, handler: Callable[[M, Delivery], Awaitable[None]],
                  stop: asyncio.Event, *, active: Callable[[], bool] | None = None) -> None:
    """One consumer's subscriber until `stop` is set. `active`: when given, the subscriber runs only
    while it is true (a standby without the lease fetches nothing)."""
    if not await ensure_durable(bus, consumer, stop):
        return
    bus.outcomes.register(consumer)
    router = NatsRouter()
    route(router, consumer, handler, bus.inbox_prefix)
    bus.broker.include_router(router)
    subs = list(router.subscribers)
    running = False

    async def follow_active() -> None:
        nonlocal running
        want = active is None or active()
        if want and not running:
            for sub in subs:
                await sub.start()
            running = True
        elif running and not want:
            for sub in subs:
                await sub.stop()
            running = False

    def unavailable(exc: Exception) -> float | None:
        # Starting a subscriber asks NATS for the consumer's info: NATS unreachable, or a cluster's
        # stream without a leader for a moment, makes it time out. Tried again at the next pass.
        if isinstance(exc, (nats.errors.Error, TimeoutError, OSError)):
            log.warning("%s: cannot start the subscriber yet (%s: %s); trying again", consumer.spec.durable,
                        type(exc).__name__, exc)
            return 1.0
        raise exc

    try:
        await every(0.2, follow_active, stop, on_error=unavailable)
    finally:
        if running:
            for sub in subs:
                await sub.stop()

