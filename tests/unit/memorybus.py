"""A relaunch `Bus` on FastStream's TestNatsBroker, for handler tests with the bus in memory: what a
handler publishes goes through the real `Bus.publish` and the broker's producer to in-memory
subscribers of every stream, where a test reads it. Acks, naks and deduplication do nothing here:
redelivery, dedupe and the DLQ are tested against a real nats-server (tests/integration,
tests/reliability)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from faststream.nats import JStream, NatsBroker, NatsRouter, TestNatsBroker
from faststream.nats.annotations import NatsMessage

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.consumers import raw_body
from relaunch.common.outcomes import OutcomeMiddleware
from relaunch.common.schemas import ALL_MODELS, Message

_MODELS = {m.model_fields["schema_"].default: m for m in ALL_MODELS}


@dataclass
class Published:
    subject: str
    body: Message
    msg_id: str | None
    stream: str


@dataclass
class Streams:
    """Everything published durably while the broker ran, in order."""

    messages: list[Published] = field(default_factory=list)

    @property
    def bodies(self) -> list[Message]:
        return [p.body for p in self.messages]

    def of(self, model: type[Message]) -> list[Message]:
        return [p.body for p in self.messages if isinstance(p.body, model)]

    async def last_message(self, stream: subjects.StreamSpec, subject: str) -> tuple[bytes, int] | None:
        """`Bus.last_message` over what was published here (the stream sequence is the position)."""
        for seq, p in reversed(list(enumerate(self.messages, 1))):
            if p.stream == stream.name and p.subject == subject:
                return p.body.model_dump_json(by_alias=True).encode(), seq
        return None


def _recorder(streams: Streams, stream: subjects.StreamSpec, pattern: str):
    async def record(body: bytes, msg: NatsMessage) -> None:
        schema = json.loads(body)["schema"]
        headers = msg.headers or {}
        streams.messages.append(Published(msg.raw_message.subject, _MODELS[schema].model_validate_json(body),
                                          headers.get(subjects.MSG_ID_HEADER), stream.name))

    record.__name__ = f"record_{stream.name.lower()}_{len(pattern)}"
    return record


@contextlib.asynccontextmanager
async def memory_bus(service: str = "test", *routers: NatsRouter) -> AsyncIterator[tuple[Bus, Streams]]:
    """A Bus whose broker runs in memory, with `routers` included, and the streams' recorders."""
    outcomes = OutcomeMiddleware()
    broker = NatsBroker(middlewares=[outcomes])
    for router in routers:
        broker.include_router(router)
    streams = Streams()
    for spec in subjects.STREAMS:
        for pattern in spec.subjects:
            broker.subscriber(pattern, stream=JStream(spec.name, declare=False), decoder=raw_body)(
                _recorder(streams, spec, pattern))
    async with TestNatsBroker(broker) as memory:
        bus = Bus(memory, service, outcomes, "_INBOX")
        outcomes.bus = bus
        bus.last_message = streams.last_message  # what JetStream's get_last_msg reads, from memory
        yield bus, streams
