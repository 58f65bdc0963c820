"""attribute(readings) -> who stopped the collective: victims, suspects, their nodes, whether the evidence
points at the node or at the user's code, and why in words. Pure (docs/architecture.md, "Hang evidence").

Victims are ranks waiting in a collective; a suspect is a rank elsewhere: in compute, in I/O, in the
user's Python, in a different collective than most, or behind the others on the flight recorder's
collective sequence. Invariants:
- every rank waiting in the same place blames no one (a data loader stuck on every rank, a peer outside
  the job, a collective that simply has not timed out yet): no suspect, no node;
- the evidence points at the NODE only when every suspect is in uninterruptible sleep, in a native call
  that is not the interpreter's own (a ctypes call, a driver), or behind on the collective sequence with
  no Python frame of the user's; at the USER'S CODE when a suspect is in it (time.sleep in train.py:88)
  or in a different collective than the others, called from it (collectives that do not match are the
  program's deadlock);
  otherwise it is unclear, and unclear blames no node;
- fewer than two ranks read says nothing (fail closed: the hang is handled as without evidence), except
  a rank in uninterruptible sleep, which is the node's whatever the others do.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .stacks import RankReading, Where, where

Blame = Literal["node", "user_code", "unclear", "none"]


@dataclass(frozen=True)
class RankVerdict:
    reading: RankReading
    where: Where
    role: Literal["victim", "suspect", "waiting", "unread"]


@dataclass(frozen=True)
class Attribution:
    ranks: tuple[RankVerdict, ...]
    victims: tuple[int, ...]
    suspects: tuple[int, ...]
    suspect_nodes: tuple[str, ...]
    """Only when the evidence points at the node."""
    blame: Blame
    place: str | None
    """The user-code suspect's place (file:line (func)): the same place in two attempts is a deadlock."""
    reason: str


def _ranks(numbers: Sequence[int]) -> str:
    numbers = sorted(numbers)
    return f"rank {numbers[0]}" if len(numbers) == 1 else "ranks " + ", ".join(str(n) for n in numbers)


def _waits(numbers: Sequence[int]) -> str:
    return "waits" if len(numbers) == 1 else "wait"


def _describe(r: RankReading, w: Where) -> str:
    head = f"rank {r.rank} on {r.node}"
    if w.kind == "collective":
        return f"{head} is in a different collective ({w.collective}{f' from {w.place}' if w.place else ''})"
    if w.kind == "native":
        return f"{head} is stuck in a native call ({w.call}){f' from {w.place}' if w.place else ''}"
    if w.kind == "user":
        busy = r.proc is not None and r.proc.cpu_ticks > 0 and r.proc.state == "R"
        doing = f"`{w.call}`" if w.call else ("computing" if busy else "Python code")
        return f"{head} is in {doing} at {w.place}"
    if w.kind == "library":
        return f"{head} is in {w.call}{f' called from {w.place}' if w.place else ''}"
    return f"{head} could not be read"


def _behind(readings: Sequence[RankReading]) -> set[int]:
    """Ranks whose last completed collective (flight recorder) is behind the others'."""
    seqs = {r.rank: r.seq_completed for r in readings if r.seq_completed is not None}
    if len(seqs) < 2 or len(set(seqs.values())) < 2:
        return set()
    low = min(seqs.values())
    return {rank for rank, seq in seqs.items() if seq == low}


def attribute(readings: Sequence[RankReading]) -> Attribution:
    places = {r.rank: where(r) for r in readings}
    read = [r for r in readings if places[r.rank].kind != "unknown"]
    blocked = [r for r in readings if places[r.rank].kind == "native" and r.proc is not None
               and (r.proc.state == "D" or r.proc.blocked_threads > 0)]
    victims = sorted(r.rank for r in read if places[r.rank].kind == "collective")
    behind = _behind(readings)
    suspects: set[int] = {r.rank for r in blocked} | behind
    common = ""
    if len(read) >= 2:
        others = [r for r in read if places[r.rank].kind != "collective"]
        if victims and others:
            suspects |= {r.rank for r in others}
            names = Counter(places[v].collective for v in victims).most_common(1)[0][0]
            common = f"{_ranks(victims)} {_waits(victims)} in {names}"
        else:
            groups = Counter(places[r.rank].key for r in read)
            (top, size), *rest = groups.most_common()
            if rest and size > rest[0][1]:  # one place most ranks share: the others are elsewhere
                suspects |= {r.rank for r in read if places[r.rank].key != top}
                if victims:
                    victims = [v for v in victims if places[v].key == top]
                main = [r.rank for r in read if places[r.rank].key == top]
                common = f"{_ranks(main)} {_waits(main)} in {_place_words(places[main[0]])}"
            elif not rest:
                common = f"every rank waits in the same place ({_place_words(places[read[0].rank])})"
    victims = [v for v in victims if v not in suspects]
    roles = []
    for r in readings:
        w = places[r.rank]
        role = ("suspect" if r.rank in suspects else "victim" if r.rank in victims
                else "unread" if w.kind == "unknown" else "waiting")
        roles.append(RankVerdict(r, w, role))
    accused = [v for v in roles if v.role == "suspect"]
    if not accused:
        why = common or (f"only {len(read)} of {len(readings)} ranks could be read" if len(read) < 2
                         else "the ranks are in different places and none waits in a collective")
        return Attribution(tuple(roles), tuple(victims), (), (), "none", None, f"no rank blamed: {why}")
    kinds = []
    for v in accused:
        r, w = v.reading, v.where
        if w.kind == "native" or (r.rank in behind and w.kind != "user"):
            kinds.append("node")
        elif w.kind == "user" or (w.kind == "collective" and w.place):  # mismatched collectives: the program's
            kinds.append("user_code")
        else:
            kinds.append("unclear")
    blame: Blame = ("user_code" if "user_code" in kinds else "node" if all(k == "node" for k in kinds)
                    else "unclear")
    nodes = tuple(dict.fromkeys(v.reading.node for v, k in zip(accused, kinds) if k == "node")) \
        if blame == "node" else ()
    place = next((v.where.place for v, k in zip(accused, kinds) if k == "user_code"), None)
    said = "; ".join(_describe(v.reading, v.where) + (" (behind on the collective sequence)"
                                                      if v.reading.rank in behind else "") for v in accused)
    reason = f"{said} while {common}" if common else said
    return Attribution(tuple(roles), tuple(victims), tuple(sorted(v.reading.rank for v in accused)), nodes,
                       blame, place, reason)


def _place_words(w: Where) -> str:
    if w.kind == "collective":
        return w.collective or "a collective"
    if w.call and w.place:
        return f"{w.call} at {w.place}"
    return w.place or w.call or "an unknown place"
