"""Server-sent events from the EVENTS stream: which subject filters a client may ask for, and the
frames it receives.

Frame format (one per bus message):
    id: <EVENTS stream sequence>        EventSource sends it back as Last-Event-ID on reconnect,
                                        and the API resumes right after it: nothing lost, no repeats
    data: {"seq", "subject", "at", "schema", "message"}
A comment line (": keep-alive") is sent when the stream is quiet.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from relaunch.common import subjects
from relaunch.common.subject_filters import within

STREAM = subjects.EVENTS
DEFAULT_FILTER = STREAM.subjects[0]
HEARTBEAT = b": keep-alive\n\n"
RETRY_MS = 3000
"""How long a browser's EventSource waits before reconnecting after the stream ends or fails."""


class FilterError(ValueError):
    """A subject filter the EVENTS stream cannot serve; the message says what would work."""


def check_filter(subject: str) -> str:
    """Accept a NATS subject filter that selects only subjects of the EVENTS stream."""
    hint = (f"use {DEFAULT_FILTER} (everything), or narrow it, e.g. {subjects.ALL_ANOMALIES} or "
            f"{subjects.event_anomaly('<cluster>', '<job_id>')}")
    tokens = subject.split(".")
    if not subject or any(not t or any(c.isspace() for c in t) for t in tokens):
        raise FilterError(f"{subject!r} is not a NATS subject filter (dot-separated tokens, no spaces); {hint}")
    if any(t == ">" for t in tokens[:-1]) or any((">" in t or "*" in t) and len(t) > 1 for t in tokens):
        raise FilterError(f"{subject!r}: '>' may only be the last token and wildcards stand alone; {hint}")
    if not any(within(subject, stream_filter) for stream_filter in STREAM.subjects):
        raise FilterError(f"{subject!r} is outside the {STREAM.name} stream ({', '.join(STREAM.subjects)}); {hint}")
    return subject


def parse_last_event_id(value: str | None) -> int | None:
    """The stream sequence a reconnecting EventSource saw last; None when absent or not ours."""
    if value and value.strip().isdigit():
        return int(value.strip())
    return None


def frame(seq: int, subject: str, data: bytes, at: dt.datetime | None, withheld: str = "") -> bytes:
    """One SSE frame. `withheld` (why this reader may not see log excerpts; "" when it may): an
    anomaly's evidence lines are left out and `evidence_withheld` says why (docs/security.md)."""
    try:
        message: Any = json.loads(data)
    except ValueError:  # not JSON: pass it on as text rather than hide it
        message = data.decode("utf-8", "replace")
    if withheld and isinstance(message, dict) and message.get("evidence"):
        message = {**message, "evidence": [], "evidence_withheld": withheld}
    if withheld and isinstance(message, dict) and isinstance(message.get("ranks"), list):
        # HangEvidence: the ranks' stack frames are the job's own text, withheld as its log lines are
        # (relaunch.api.domain.evidence.withhold_lines does the same for the ledger's copy)
        message = {**message, "evidence_withheld": withheld,
                   "ranks": [{**r, "frames": []} if isinstance(r, dict) else r for r in message["ranks"]]}
    schema = message.get("schema") if isinstance(message, dict) else None
    body = json.dumps({"seq": seq, "subject": subject, "at": at.isoformat() if at else None, "schema": schema,
                       "message": message}, separators=(",", ":"))
    # json.dumps escapes newlines inside strings, so one data: line carries the whole event.
    return f"id: {seq}\ndata: {body}\n\n".encode()


def preamble() -> bytes:
    return f"retry: {RETRY_MS}\n: relaunch events from {STREAM.name}\n\n".encode()
