"""A job's progress kept for its whole life at a bounded resolution: the shape shared by the detector
(which writes it to Redis as it reads progress) and the api (which draws it). Pure.

One Redis hash per job (`key()`): field "w" is the bucket width in seconds, every other field is one
bucket, named by its start (whole seconds since the epoch), holding
    n,step_min,step_max,throughput_sum,throughput_n,step_time_sum,step_time_n,first_at,last_at
A job starts at BASE_WIDTH_S; whenever it has more than MAX_BUCKETS buckets, the width doubles and
neighbouring buckets merge (`compact`). So a job never holds more than MAX_BUCKETS buckets (a
week-long run at 600 s per report or 10 per second alike: about 512 x 70 bytes), the recent past is
as fine as the whole life allows, and nothing needs sweeping: the hash expires TTL_S after the
job's last report. Attempts are not keys: an attempt is the time between two of the ledger's
attempt starts, so the reader splits the series there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

PREFIX = "relaunch:progress-history"
BASE_WIDTH_S = 2
MAX_BUCKETS = 512
TTL_S = 30 * 86400
"""As long as the EVENTS stream keeps a job's anomalies and reconcile steps."""


def key(cluster: str, job_id: str) -> str:
    return f"{PREFIX}:{cluster}:{job_id}"


@dataclass(frozen=True)
class Bucket:
    start: int
    n: int
    step_min: int
    step_max: int
    throughput_sum: float
    throughput_n: int
    step_time_sum: float
    step_time_n: int
    first_at: float
    last_at: float

    @property
    def throughput(self) -> float | None:
        return self.throughput_sum / self.throughput_n if self.throughput_n else None

    @property
    def step_time_s(self) -> float | None:
        return self.step_time_sum / self.step_time_n if self.step_time_n else None

    def encode(self) -> str:
        return (f"{self.n},{self.step_min},{self.step_max},{self.throughput_sum:.6g},{self.throughput_n},"
                f"{self.step_time_sum:.6g},{self.step_time_n},{self.first_at:.3f},{self.last_at:.3f}")


def decode(start: str | bytes, value: str | bytes) -> Bucket:
    if isinstance(start, bytes):
        start = start.decode()
    if isinstance(value, bytes):
        value = value.decode()
    n, smin, smax, tps, tpn, sts, stn, first, last = value.split(",")
    return Bucket(int(start), int(n), int(smin), int(smax), float(tps), int(tpn), float(sts), int(stn),
                  float(first), float(last))


def merge(a: Bucket, b: Bucket, start: int | None = None) -> Bucket:
    return Bucket(a.start if start is None else start, a.n + b.n, min(a.step_min, b.step_min),
                  max(a.step_max, b.step_max), a.throughput_sum + b.throughput_sum, a.throughput_n + b.throughput_n,
                  a.step_time_sum + b.step_time_sum, a.step_time_n + b.step_time_n, min(a.first_at, b.first_at),
                  max(a.last_at, b.last_at))


def point(at: float, step: int, throughput: float | None, step_time_s: float | None, width: int) -> Bucket:
    start = int(math.floor(at / width) * width)
    return Bucket(start, 1, step, step, throughput or 0.0, 0 if throughput is None else 1, step_time_s or 0.0,
                  0 if step_time_s is None else 1, at, at)


def add(buckets: dict[int, Bucket], width: int, points: Iterable[tuple[float, int, float | None, float | None]],
        max_buckets: int = MAX_BUCKETS) -> tuple[dict[int, Bucket], int]:
    """The series with `points` (at, step, throughput, step_time_s) added, compacted while too long.
    (The detector's Redis script does the same server-side; tests hold the two equal.)"""
    out = dict(buckets)
    for at, step, tp, st in points:
        p = point(at, step, tp, st, width)
        out[p.start] = merge(out[p.start], p) if p.start in out else p
        while len(out) > max_buckets:
            out, width = compact(out, width)
    return out, width


def compact(buckets: dict[int, Bucket], width: int) -> tuple[dict[int, Bucket], int]:
    wider = width * 2
    out: dict[int, Bucket] = {}
    for b in sorted(buckets.values(), key=lambda b: b.start):
        start = b.start // wider * wider
        out[start] = merge(out[start], b, start) if start in out else Bucket(start, *_fields(b)[1:])
    return out, wider


def _fields(b: Bucket) -> tuple:
    return (b.start, b.n, b.step_min, b.step_max, b.throughput_sum, b.throughput_n, b.step_time_sum,
            b.step_time_n, b.first_at, b.last_at)


def read(fields: dict) -> tuple[list[Bucket], int]:
    """(buckets oldest first, width) of a hash as HGETALL returns it."""
    width = BASE_WIDTH_S
    found = []
    for name, value in fields.items():
        name = name.decode() if isinstance(name, bytes) else name
        if name == "w":
            width = int(value)
        elif name.lstrip("-").isdigit():
            found.append(decode(name, value))
    return sorted(found, key=lambda b: b.start), width
