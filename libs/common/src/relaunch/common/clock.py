"""The one clock the services read (pure code takes the time as an argument; docs/architecture.md)."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
