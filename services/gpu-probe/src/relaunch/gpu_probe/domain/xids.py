"""The XID table and the probe's memory of recent XIDs. Pure: time is passed in.

Invariants:
- the table is data: a code's class decides its weight, never its position in the code;
- an XID is a point event, so the probe keeps the recent ones (a window) and reports them in every
  NodeHealth until they age out; otherwise a fault seen between two samples would vanish from the
  next heartbeat and the decider, looking at the failure window, could miss it;
- memory is bounded (MAX_REMEMBERED), so an XID storm cannot grow the probe without limit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from relaunch.common.schemas import XidClass

from .samples import XidEvent

MAX_REMEMBERED = 4096
"""Most XID events kept; the oldest go first. Enough for a long storm on 8 GPUs at one per second."""


@dataclass(frozen=True)
class XidInfo:
    xid_class: XidClass
    description: str


# Hardware: the GPU itself is faulty or needs a reset; the node should be avoided.
# Application: usually the program's fault (bad address, killed); only repetition on one GPU, while
# the node's other GPUs stay clean, points at the hardware (see classification.py).
# Remap: the memory repaired itself by remapping a row; recorded, not a failure.
XID_TABLE: dict[int, XidInfo] = {
    13: XidInfo("application", "graphics engine exception (often an illegal memory access in the program)"),
    31: XidInfo("application", "GPU memory page fault (often a bad address in the program)"),
    43: XidInfo("application", "GPU stopped processing (the program's context was reset)"),
    45: XidInfo("application", "preemptive cleanup after earlier errors (the process was killed)"),
    48: XidInfo("hardware", "double-bit ECC error"),
    63: XidInfo("remap", "ECC page retirement or row remapping recorded"),
    64: XidInfo("hardware", "ECC page retirement or row remapping failed"),
    74: XidInfo("hardware", "NVLink error"),
    79: XidInfo("hardware", "GPU has fallen off the bus"),
    92: XidInfo("hardware", "high single-bit ECC error rate"),
    94: XidInfo("hardware", "contained ECC error"),
    95: XidInfo("hardware", "uncontained ECC error"),
    119: XidInfo("hardware", "GSP RPC timeout"),
    120: XidInfo("hardware", "GSP error"),
    140: XidInfo("hardware", "unrecovered ECC error"),
    143: XidInfo("hardware", "GPU hardware fault (see NVIDIA's XID catalogue)"),
}


def xid_info(code: int) -> XidInfo:
    return XID_TABLE.get(code, XidInfo("unknown", "not in relaunch's XID table"))


def remember(history: Sequence[XidEvent], new: Iterable[XidEvent], now: dt.datetime,
             window: dt.timedelta) -> tuple[XidEvent, ...]:
    """The events still inside `window` before `now`, new ones included, oldest first, bounded."""
    horizon = now - window
    kept = [e for e in (*history, *new) if e.at >= horizon]
    kept.sort(key=lambda e: e.at)
    return tuple(kept[-MAX_REMEMBERED:])
