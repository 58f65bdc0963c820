"""What a custom consumer needs (docs/custom-consumer.md): a connection as its declared NATS user, with
FastStream or with nats-py, and message bodies as relaunch's typed models.

The user, its password file, the server and TLS come from the RELAUNCH_NATS_* settings, as for every
relaunch program (`source .run/consumers/<name>.env` on the local stack): the password is read from its
file, never from the environment or a command line. Each NATS user has its own reply-inbox prefix
(`_INBOX_<user>`, relaunch.common.natsauth): the server sends a pulled message, and a JetStream
answer, to nobody else, so both connections below use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from relaunch.common.schemas import Message

from .events import decode

M = TypeVar("M", bound=Message)


def _options() -> tuple[list[str], dict]:
    from relaunch.common.connection import connect_options
    from relaunch.common.settings import nats_servers

    from .settings import nats_url

    return nats_servers(nats_url()), connect_options()


def inbox_prefix() -> str:
    """This user's reply-inbox prefix (RELAUNCH_NATS_USER's), or NATS' default without a user."""
    return _options()[1].get("inbox_prefix", "_INBOX")


async def connect(**kwargs: Any):
    """A nats-py connection as the declared user (RELAUNCH_NATS_*), reconnecting for ever."""
    import nats

    servers, options = _options()
    return await nats.connect(servers, max_reconnect_attempts=-1, **{**options, **kwargs})


def broker(**kwargs: Any):
    """A FastStream NatsBroker as the declared user (RELAUNCH_NATS_*). Give its subscribers
    `inbox_prefix=relaunch.client.pull_inbox()`: nats-py's pull subscriptions take their reply inbox
    from there, not from the connection."""
    from faststream.nats import NatsBroker
    from faststream.security import BaseSecurity
    from faststream.nats.security import NatsSecurity, NatsUserPassword

    servers, options = _options()
    tls = options.pop("tls", None)
    security: BaseSecurity | None = None
    if options.get("user"):
        security = NatsUserPassword(options.pop("user"), options.pop("password", ""), ssl_context=tls)
    elif tls is not None:
        security = NatsSecurity(ssl_context=tls)
    return NatsBroker(servers, security=security, max_reconnect_attempts=-1, **{**options, **kwargs})


def pull_inbox() -> bytes:
    """The reply-inbox prefix for a FastStream pull subscriber (`inbox_prefix=`)."""
    return f"{inbox_prefix()}.".encode()


def decoder(model: type[M]) -> Callable:
    """A FastStream decoder: the body as `model`, or None when it is not one (another type, or a
    schema version this release does not know), for the handler to reject rather than retry."""

    async def decode_body(message: Any) -> M | None:
        body = decode(message.body)
        return body if isinstance(body, model) else None

    return decode_body
