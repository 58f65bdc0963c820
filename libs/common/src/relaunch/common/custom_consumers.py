"""Custom consumers: programs outside relaunch that read EVENTS or ADVICE through a durable consumer of
their own (docs/custom-consumer.md), each declared once.

The declaration is RELAUNCH_CUSTOM_CONSUMERS, a JSON list (CommonSettings.custom_consumers): what
scripts/stack.sh, the chart's `customConsumers` and the compose file hand to the NATS setup. From it come
- the consumer's NATS user and its password file (natsauth): it may read its own durable (info, pull,
  and ack when declared so) and its own reply inbox, nothing else: no other durable, no stream, no
  publish of any relaunch subject;
- its durable consumer, created by the admin user at setup (natsauth setup), so that the filter,
  ack_wait and max_deliver are the declaration's: the consumer's user needs no right to create or
  change a consumer, and so cannot widen its filter to subjects it was not declared for.

Invariant: pure (no I/O); names are NATS subject tokens, so a durable or a user never holds a dot.
"""

from __future__ import annotations

from typing import Literal

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from . import subjects
from .subject_filters import within

TOKEN = r"^[A-Za-z0-9_-]{1,64}$"
"""A NATS user name and a durable name alike: one subject token (no dots, no wildcards)."""
STREAMS = {spec.name: spec for spec in (subjects.EVENTS, subjects.ADVICE)}
"""The streams a custom consumer may read: never SIGNALS (log lines and progress of every user's jobs)
nor DLQ (dead letters quote the messages they hold), docs/security.md."""


class CustomConsumer(BaseModel):
    """One custom consumer: a NATS user and its one durable consumer. Keys are camelCase in JSON and
    in the chart's values (`filterSubjects`, `ackWaitS`, `maxDeliver`); snake_case is accepted too."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)

    name: str = Field(pattern=TOKEN)
    """Its NATS user; its password is the file `<name>.pass` beside the services' (e.g. .run/creds)."""
    stream: Literal["EVENTS", "ADVICE"]
    """ADVICE: every decision (relaunch.advice.<cluster>.<job>); EVENTS: anomalies, reconcile steps, audit."""
    filter_subjects: tuple[str, ...] = Field(min_length=1)
    """What the durable delivers, each inside the stream's subjects (e.g. relaunch.event.reconcile.>)."""
    durable: str = Field(pattern=TOKEN)
    """The durable consumer's name on the server (where its position is kept); defaults to `name`."""
    ack: bool = True
    """True: it acknowledges each message (redelivered after ack_wait_s until it does, so none is lost);
    False: delivered once, never acked (AckPolicy none), and its user gets no right to ack."""
    ack_wait_s: float = Field(default=30.0, gt=0)
    """How long a delivered message may stay unacknowledged before the server delivers it again."""
    max_deliver: int = Field(default=20, ge=-1)
    """Deliveries per message before the server gives up on it (-1: no limit)."""
    deliver: Literal["new", "all"] = "new"
    """Where a new durable starts: "new" with what is published from its creation on, "all" with what
    the stream still holds (EVENTS and ADVICE keep 30 days). Fixed once the durable exists."""

    @model_validator(mode="before")
    @classmethod
    def _durable_defaults_to_name(cls, data: object) -> object:
        if isinstance(data, dict) and "durable" not in data and "name" in data:
            return {**data, "durable": data["name"]}
        return data

    @field_validator("filter_subjects")
    @classmethod
    def _no_empty_subject(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for subject in value:
            if not subject or " " in subject or any(not token for token in subject.split(".")):
                raise ValueError(f"{subject!r} is not a NATS subject")
        return value

    @model_validator(mode="after")
    def _filters_inside_the_stream(self) -> CustomConsumer:
        allowed = STREAMS[self.stream].subjects
        outside = [s for s in self.filter_subjects if not any(within(s, p) for p in allowed)]
        if outside:
            raise ValueError(f"custom consumer {self.name!r}: {', '.join(outside)} is not in stream {self.stream} "
                             f"({', '.join(allowed)})")
        return self

    def consumer_config(self) -> ConsumerConfig:
        """The durable consumer the admin creates at setup (natsauth setup)."""
        several = len(self.filter_subjects) > 1
        return ConsumerConfig(
            durable_name=self.durable, name=self.durable,
            ack_policy=AckPolicy.EXPLICIT if self.ack else AckPolicy.NONE,
            deliver_policy=DeliverPolicy.NEW if self.deliver == "new" else DeliverPolicy.ALL,
            ack_wait=self.ack_wait_s, max_deliver=self.max_deliver,
            filter_subject=None if several else self.filter_subjects[0],
            filter_subjects=list(self.filter_subjects) if several else None)

    def facts(self) -> dict:
        """The declaration as JSON (the chart's and the compose file's keys)."""
        return self.model_dump(mode="json", by_alias=True)


def check_unique(declared: tuple[CustomConsumer, ...], reserved_users: set[str], reserved_durables: set[str]) -> None:
    """Refuse two declarations with one name or one durable, or one that takes relaunch's own name or durable."""
    seen_users: set[str] = set()
    seen_durables: set[tuple[str, str]] = set()
    for c in declared:
        if c.name in reserved_users or c.name.startswith("gpu-probe"):
            raise ValueError(f"custom consumer {c.name!r}: that NATS user is relaunch's own; choose another name")
        if c.durable in reserved_durables:
            raise ValueError(f"custom consumer {c.name!r}: durable {c.durable!r} is a relaunch service's")
        if c.name in seen_users or (c.stream, c.durable) in seen_durables:
            raise ValueError(f"custom consumer {c.name!r} is declared twice (its name or its durable)")
        seen_users.add(c.name)
        seen_durables.add((c.stream, c.durable))
