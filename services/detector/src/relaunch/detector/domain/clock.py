"""Time as the pure detectors take it: seconds since the epoch, or an aware datetime."""

from __future__ import annotations

import datetime as dt


def seconds(now: float | dt.datetime) -> float:
    if isinstance(now, dt.datetime):
        if now.tzinfo is None:
            raise ValueError("naive datetime: pass an aware datetime (UTC) or seconds since the epoch")
        return now.timestamp()
    return float(now)


def when(t: float | None) -> str:
    """A time for people: the wall clock for epoch seconds, else a relative t= (simulations)."""
    if t is None:
        return "never"
    if t > 1e9:  # seconds since the epoch (after 2001): show the wall clock
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"t={t:.1f} s"
