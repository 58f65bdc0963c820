"""NATS subject filters, matched (pure)."""

from __future__ import annotations


def within(subject: str, pattern: str) -> bool:
    """True when every subject `subject` matches (it may hold NATS wildcards, `*` and a last `>`) is matched by
    `pattern` too; for a concrete subject: whether `pattern` matches it. The one matcher of subjects in relaunch
    (stream_of, a custom consumer's filters, the API's event-stream filters)."""
    got, allowed = subject.split("."), pattern.split(".")
    for i, token in enumerate(allowed):
        if token == ">":
            return len(got) > i
        if i >= len(got) or got[i] == ">" or (token != "*" and token != got[i]):
            return False
    return len(got) == len(allowed)
