"""A message body as a typed message, or the reason it is none: what every consumer dead-letters
(docs/architecture.md, "Errors"). Pure."""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError

from .errors import PermanentError
from .schemas import Message

M = TypeVar("M", bound=Message)

MAX_BODY_BYTES = 1024 * 1024
"""A body larger than this is dead-lettered unparsed (NATS' default max_payload; a server configured
with a larger one does not make the services parse more)."""


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
