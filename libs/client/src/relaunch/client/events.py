"""Typed events for custom consumers.

`subscribe` follows live messages with a plain NATS subscription (nothing durable is created on the
server); for work that must not miss a message, create a durable JetStream consumer on the EVENTS
or ADVICE stream instead (see docs/).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import nats

from relaunch.common.schemas import ALL_MODELS, Message
from relaunch.common.settings import nats_servers

_BY_SCHEMA = {model.model_fields["schema_"].default: model for model in ALL_MODELS}
EVENTS_AND_ADVICE = ("relaunch.event.>", "relaunch.advice.>", "relaunch.signal.job.>", "relaunch.signal.node.>")
"""What the shared `cli` NATS user may follow (docs/security.md): events, Advice, job observations and node
health; never log lines, progress reports (their keys) or dead letters."""


def decode(data: bytes) -> Message | None:
    """The typed model for a message body, or None when it is not a relaunch message we know."""
    try:
        schema = json.loads(data).get("schema")
    except (ValueError, AttributeError):
        return None
    model = _BY_SCHEMA.get(schema)
    if model is None:
        return None
    try:
        return model.model_validate_json(data)
    except ValueError:
        return None


class EventStream:
    """Live relaunch messages matching `subject`, typed; the subscription exists from `__aenter__` on.

    A slow reader never blocks the bus: past `max_pending` queued messages, new ones are dropped
    and counted in `dropped`.
    """

    def __init__(self, nats_url: str, subject: str | tuple[str, ...] = EVENTS_AND_ADVICE,
                 max_pending: int = 10_000) -> None:
        self.nats_url, self.subject = nats_url, subject
        self.queue: asyncio.Queue[tuple[str, Message]] = asyncio.Queue(maxsize=max_pending)
        self.dropped = 0
        self._nc = None

    async def __aenter__(self) -> EventStream:
        from relaunch.common.connection import connect_options  # user and TLS from RELAUNCH_NATS_* settings

        self._nc = await nats.connect(nats_servers(self.nats_url), connect_timeout=3, max_reconnect_attempts=-1,
                                      **connect_options())
        for subject in (self.subject,) if isinstance(self.subject, str) else self.subject:
            await self._nc.subscribe(subject, cb=self._on_msg)
        await self._nc.flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._nc is not None:
            await self._nc.close()

    async def _on_msg(self, msg) -> None:
        model = decode(msg.data)
        if model is None:
            return
        try:
            self.queue.put_nowait((msg.subject, model))
        except asyncio.QueueFull:
            self.dropped += 1

    async def next(self, timeout: float | None = None) -> tuple[str, Message]:
        return await asyncio.wait_for(self.queue.get(), timeout=timeout)

    def __aiter__(self) -> AsyncIterator[tuple[str, Message]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[tuple[str, Message]]:
        while True:
            yield await self.queue.get()


async def subscribe(nats_url: str, subject: str | tuple[str, ...] = EVENTS_AND_ADVICE,
                    ) -> AsyncIterator[tuple[str, Message]]:
    """Yield (subject, typed message) for every relaunch message published from now on."""
    async with EventStream(nats_url, subject) as stream:
        async for item in stream:
            yield item
