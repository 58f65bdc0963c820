"""Rate limit, digest and back-off of one route. Pure, time passed in.

A route allows `per_minute` posts on average and `burst` at once (a token bucket). What one pull
brings for a route is planned together (plan()):
- at most `digest_over` notices, and tokens for each: one post per notice;
- more (a storm), and at least one token: one digest post holding them all;
- no token left: nothing is posted; the messages are redelivered when a token is back (retry_in),
  and whatever has piled up by then arrives in one pull and goes out as one digest.
A post that fails for a reason that may pass (a timeout, 5xx, 429) is retried after backoff(n),
doubling from `base` up to `cap`: the receiver being down loses nothing, it only delays.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from .notices import Notice


@dataclass(frozen=True)
class Bucket:
    tokens: float
    at: dt.datetime


@dataclass(frozen=True)
class Plan:
    posts: tuple[tuple[Notice, ...], ...]
    """Each post's notices: one, or several for a digest."""
    held: tuple[Notice, ...]
    """Not posted now (no token): to come back after retry_in seconds."""
    bucket: Bucket
    retry_in: float = 0.0


def refill(bucket: Bucket | None, per_minute: float, burst: int, now: dt.datetime) -> Bucket:
    if bucket is None:
        return Bucket(float(burst), now)
    gained = max((now - bucket.at).total_seconds(), 0.0) * per_minute / 60.0
    return Bucket(min(float(burst), bucket.tokens + gained), now)


def plan(notices: list[Notice], bucket: Bucket | None, per_minute: float, burst: int, digest_over: int,
         now: dt.datetime) -> Plan:
    if per_minute <= 0 or burst < 1 or digest_over < 1:
        raise ValueError("per_minute must be positive, burst and digest_over at least 1")
    full = refill(bucket, per_minute, burst, now)
    if not notices:
        return Plan((), (), full)
    whole = int(full.tokens)
    if len(notices) <= digest_over and len(notices) <= whole:
        return Plan(tuple((n,) for n in notices), (), replace(full, tokens=full.tokens - len(notices)))
    if whole >= 1:
        return Plan((tuple(notices),), (), replace(full, tokens=full.tokens - 1))
    wait = (1.0 - full.tokens) * 60.0 / per_minute
    return Plan((), tuple(notices), full, retry_in=round(max(wait, 0.05), 3))


def backoff(failures: int, base: float, cap: float) -> float:
    """Seconds before the next try after `failures` failed ones (1 = the first failed)."""
    return min(cap, base * 2 ** max(failures - 1, 0))
