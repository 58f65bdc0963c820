"""collapse(entries) -> the same evidence with repeated readings of one fault said once. Pure.

gpu-probe publishes a node's health every few seconds, and an XID stays in its readings until it ages
out (docs/operator-guide.md), so one fault reaches the decider as one reading per heartbeat. Said once
per reading, an Advice reason repeated the same XID six times. Collapsed, the reading reads:

    gpu-probe: failed: GPU 2: XID 79 (GPU has fallen off the bus), hardware, seen 6x 05:45:34-05:46:24

Invariants:
- nothing is lost: every entry ends up in exactly one output entry, whose count is the number of
  readings it stands for and whose span runs from the first to the last reading's time;
- order is kept (an entry stands where its first reading stood);
- idempotent: collapsing a collapsed list (or a list mixing collapsed and single readings of the same
  fault, as the ledger holds after a decider upgrade) merges them by adding counts and widening spans;
- an entry that is not a timed reading is kept verbatim, and identical ones are said once with
  ", seen Nx" appended;
- times are the readings' HH:MM:SS (UTC); a span is ordered by the text of its times, so a fault read
  across midnight shows its span as first..last of that order (a known, harmless simplification).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_TIME = r"\d\d:\d\d:\d\d"
_SINGLE = re.compile(rf"^(?P<head>[\w-]+: \w+) at (?P<at>{_TIME}): (?P<text>.*)$", re.S)
"""One reading, as attribution words it: "gpu-probe: failed at 05:45:34: <what it read>"."""
_COLLAPSED = re.compile(
    rf"^(?P<head>[\w-]+: \w+): (?P<text>.*), seen (?P<count>\d+)x (?P<first>{_TIME})(?:-(?P<last>{_TIME}))?$", re.S)
_INNER_ONCE = re.compile(r", seen \d+x(?=;|$)")
"""gpu-probe's own count of an XID inside a single reading: it grows from one reading to the next
(heartbeats every 2 s see the same event again), so it is dropped and the reading count replaces it."""
_PLAIN_REPEAT = re.compile(r"^(?P<text>.*), seen (?P<count>\d+)x$", re.S)


@dataclass
class _Group:
    head: str
    text: str
    count: int
    first: str | None
    last: str | None

    def render(self) -> str:
        if self.first is None:
            return self.text if self.count == 1 else f"{self.text}, seen {self.count}x"
        span = self.first if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.head}: {self.text}, seen {self.count}x {span}"


def _parse(entry: str) -> tuple[tuple[str, str], _Group]:
    if m := _COLLAPSED.match(entry):
        g = _Group(m["head"], m["text"], int(m["count"]), m["first"], m["last"] or m["first"])
        return (g.head, g.text), g
    if m := _SINGLE.match(entry):
        text = _INNER_ONCE.sub("", m["text"])
        g = _Group(m["head"], text, 1, m["at"], m["at"])
        return (g.head, g.text), g
    if (m := _PLAIN_REPEAT.match(entry)) and not re.search(rf"{_TIME}$", entry):
        return ("", m["text"]), _Group("", m["text"], int(m["count"]), None, None)
    return ("", entry), _Group("", entry, 1, None, None)


def collapse(entries: Iterable[str]) -> list[str]:
    groups: dict[tuple[str, str], _Group] = {}
    for entry in entries:
        key, group = _parse(str(entry))
        found = groups.get(key)
        if found is None:
            groups[key] = group
            continue
        found.count += group.count
        if group.first is not None:
            found.first = min(x for x in (found.first, group.first) if x is not None)
            found.last = max(x for x in (found.last, group.last) if x is not None)
    return [g.render() for g in groups.values()]
