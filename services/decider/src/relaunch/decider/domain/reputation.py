"""A node's reputation across jobs and users, decaying with time, forgotten by a clearance. Pure.

standing(exclusions, now, half_life) -> what a node's past exclusions for other jobs still say
(docs/policy.md, "Node history"). Each exclusion is an `Exclusion`: the other job, when its Advice left
the node out, the job's owner (Slurm user id; None when not known) and whether evidence the job's owner
does not control stood behind it (`corroborated`: a gpu-probe "failed" reading, the node lost while
its gpu-probe fell silent, or Slurm's own word that the node failed). The rules:

1. each other job counts once: its latest exclusion of the node, weighted 0.5 ** (age / half_life)
   (now 1, one half-life ago 0.5; older than HORIZON_HALF_LIVES half-lives: not at all);
2. a corroborated exclusion adds its weight: gpu-probe and Slurm are not the job's user talking;
3. exclusions made on the job's own log text alone (what the job printed: an XID or NCCL line, a slow
   rank) add at most one weight per owner, that owner's newest: one user's many jobs weigh as one;
4. every job whose owner is not known is one and the same unknown owner for rule 3, and that owner is
   never counted as an independent user (it may be any user, the current job's owner included);
5. the node is a suspect for every job it runs (`Standing.suspect`) when the weight reaches
   HISTORY_WEIGHT and at least one counted exclusion was corroborated or at least two different
   known users' jobs stand behind it. One user's log text alone (weight at most 1) never does.

With the default half-life of 48 h that is two corroborated exclusions within about a day, or the log
text of two different users' jobs within about a day; a week-old record has all but vanished.

Invariants:
- one user cannot make a node suspect for anyone: their log text weighs at most 1 < HISTORY_WEIGHT,
  and without corroboration a second, different, known user is needed;
- decay needs no sweeper and no write: the weight is computed from the exclusions' times at each
  decision, so it falls as time passes even when nothing else happens;
- an operator who repaired a node clears it (`relaunch nodes clear NODE`, docs/api.md): the ledger
  adapter reads only exclusions and readings after the newest clearance, so its history is forgotten
  from then on, and the clearance is kept as an audited row (nothing is erased);
- an exclusion made on history alone is not read at all (`counts_in_history`): no feedback loop;
- exclusions in the future (clock skew between services) count as now, never more than 1.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

HALF_LIFE = dt.timedelta(hours=48)
"""Default half-life of a node's history (RELAUNCH_DECIDER_NODE_HISTORY_HALF_LIFE_S)."""
HISTORY_WEIGHT = 1.5
"""A node whose decayed history weighs at least this (and passes rule 5's gate) is suspect for every job."""
HORIZON_HALF_LIVES = 5
"""Exclusions older than this many half-lives weigh under 0.04 each and are not read at all."""
INDEPENDENT_USERS = 2
"""Different known owners whose log text alone may make a node suspect for everyone."""

CORROBORATING = ("gpu-probe: failed", "lost: ", "Slurm: ")
"""How attribution's reasons begin when the evidence is not the job's own text: a gpu-probe "failed"
reading, the node lost (its gpu-probe fell silent), Slurm's word. The ledger adapter's node-history read
recognises corroborated exclusions in an Advice's evidence refs by these (adapters/node_evidence.py)."""
HISTORY_REASON = "excluded for "
"""How attribution's reason for a node suspect on its history alone begins."""


class Exclusion(NamedTuple):
    """One Advice of another job that left the node out."""

    job: str
    at: dt.datetime
    owner: int | None = None
    """The job's owner (Slurm user id); None: not known (an older actuator, or a job never observed)."""
    corroborated: bool = False
    """gpu-probe or Slurm evidence of the node stood behind it, not only the job's own log text."""


@dataclass(frozen=True)
class Standing:
    """What a node's history says now."""

    weight: float
    jobs: tuple[str, ...]
    """The other jobs that still count, newest first."""
    users: int
    """Different known owners among those jobs."""
    corroborated: int
    """Those jobs whose exclusion gpu-probe or Slurm corroborated."""

    @property
    def suspect(self) -> bool:
        """Rule 5: heavy enough, and more than one user's word behind it."""
        return self.weight >= HISTORY_WEIGHT and (self.corroborated > 0 or self.users >= INDEPENDENT_USERS)


def horizon(half_life: dt.timedelta = HALF_LIFE) -> dt.timedelta:
    """How far back the ledger adapter reads a node's exclusions."""
    return half_life * HORIZON_HALF_LIVES


def standing(exclusions: Iterable[tuple], now: dt.datetime, half_life: dt.timedelta = HALF_LIFE) -> Standing:
    """The rules above over one node's exclusions: `Exclusion`s, or (job, when[, owner[, corroborated]])."""
    if half_life <= dt.timedelta(0):
        raise ValueError(f"half_life must be positive, not {half_life}")
    latest: dict[str, Exclusion] = {}
    for entry in exclusions:
        e = Exclusion(*entry)
        seen = latest.get(e.job)
        if seen is None:
            latest[e.job] = e
            continue
        # One job, several Advice: its newest time; its owner where any said it; corroborated if any was.
        latest[e.job] = Exclusion(e.job, max(e.at, seen.at), seen.owner if seen.owner is not None else e.owner,
                                  e.corroborated or seen.corroborated)
    weight = 0.0
    counted: list[str] = []
    owners: set[int] = set()
    corroborated = 0
    by_owner: dict[object, float] = {}  # rule 3: the heaviest log-only exclusion of each owner
    for e in sorted(latest.values(), key=lambda e: e.at, reverse=True):
        age = max((now - e.at) / half_life, 0.0)
        if age > HORIZON_HALF_LIVES:
            continue
        counted.append(e.job)
        if e.owner is not None:
            owners.add(e.owner)
        if e.corroborated:
            corroborated += 1
            weight += 0.5 ** age
        else:
            key = e.owner if e.owner is not None else "unknown"  # rule 4: one unknown owner
            by_owner[key] = max(by_owner.get(key, 0.0), 0.5 ** age)
    weight += sum(by_owner.values())
    return Standing(round(weight, 3), tuple(counted), len(owners), corroborated)


def history_weight(exclusions: Iterable[tuple], now: dt.datetime,
                   half_life: dt.timedelta = HALF_LIFE) -> tuple[float, tuple[str, ...]]:
    """(weight, the jobs that still count, newest first): `standing` without its gate."""
    found = standing(exclusions, now, half_life)
    return found.weight, found.jobs


def corroborates(reason: str) -> bool:
    """Whether a reason of a suspect is evidence the job's owner does not control (CORROBORATING)."""
    return reason.startswith(CORROBORATING)


def counts_in_history(node: str, reasons: Iterable[str]) -> bool:
    """Whether an Advice that left `node` out, for these reasons of its suspect, counts in the node's
    history for other jobs: not when history was its only reason (a node once over the threshold
    would otherwise be left out by every later failing job, each of those exclusions keeping it there).
    The ledger adapter's node-history read applies the same rule to the Advice's evidence refs."""
    reasons = list(reasons)
    return not reasons or not all(r.startswith(HISTORY_REASON) for r in reasons)


def with_exclusions(history: Mapping[str, tuple[tuple, ...]],
                    newer: Mapping[str, list[tuple]]) -> Mapping[str, tuple[tuple, ...]]:
    """`history` (node -> exclusions, as read) with the exclusions `newer` of decisions taken since the
    read (a batch's earlier ones, newest first), so that each decision of a batch weighs the ones before
    it as if they had been committed one at a time; an equal time sorts the newest decision first."""
    if not newer:
        return history
    out = dict(history)
    for node, entries in newer.items():
        out[node] = tuple(entries) + tuple(history.get(node, ()))
    return out
