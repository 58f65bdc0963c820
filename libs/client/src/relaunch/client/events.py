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

_BY_SCHEMA = {model.model_fields["schema_"].default: model for model in ALL_MODELS}


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


async def subscribe(nats_url: str, subject: str = "relaunch.>") -> AsyncIterator[tuple[str, Message]]:
    """Yield (subject, typed message) for every relaunch message published from now on."""
    nc = await nats.connect(nats_url, connect_timeout=3, max_reconnect_attempts=-1)
    queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)

    async def on_msg(msg) -> None:
        model = decode(msg.data)
        if model is not None and not queue.full():
            queue.put_nowait((msg.subject, model))

    sub = await nc.subscribe(subject, cb=on_msg)
    try:
        while True:
            yield await queue.get()
    finally:
        await sub.unsubscribe()
        await nc.drain()
