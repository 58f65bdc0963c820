"""A node's reputation across jobs, decaying with time, forgotten by an operator's clearance. Pure.

history_weight(exclusions, now, half_life) -> how strongly a node's past exclusions for other jobs
still count. Each other job counts once (its latest exclusion of the node), weighted
0.5 ** (age / half_life): an exclusion now weighs 1, one half-life ago 0.5. Attribution makes a
node suspect for every job when the weight reaches HISTORY_WEIGHT (docs/policy.md "node history").
With the default half-life of 48 h that is two exclusions within about a day, or three within two
days; a week-old record has all but vanished (two jobs a week ago weigh 0.18).

Invariants:
- decay needs no sweeper and no write: the weight is computed from the exclusions' times at each
  decision, so it falls as time passes even when nothing else happens;
- an operator who repaired a node clears it (`relaunch nodes clear NODE`, docs/api.md): the ledger
  adapter reads only exclusions and readings after the newest clearance, so its history is forgotten
  from then on, and the clearance is kept as an audited row (nothing is erased);
- exclusions in the future (clock skew between services) count as now, never more than 1.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

HALF_LIFE = dt.timedelta(hours=48)
"""Default half-life of a node's history (RELAUNCH_DECIDER_NODE_HISTORY_HALF_LIFE_S)."""
HISTORY_WEIGHT = 1.5
"""A node whose decayed history weighs at least this is suspect for every job it runs."""
HORIZON_HALF_LIVES = 5
"""Exclusions older than this many half-lives weigh under 0.04 each and are not read at all."""


def horizon(half_life: dt.timedelta = HALF_LIFE) -> dt.timedelta:
    """How far back the ledger adapter reads a node's exclusions."""
    return half_life * HORIZON_HALF_LIVES


def history_weight(exclusions: Iterable[tuple[str, dt.datetime]], now: dt.datetime,
                   half_life: dt.timedelta = HALF_LIFE) -> tuple[float, tuple[str, ...]]:
    """(weight, the jobs that still count, newest first) of (job, when) exclusions of one node."""
    if half_life <= dt.timedelta(0):
        raise ValueError(f"half_life must be positive, not {half_life}")
    latest: dict[str, dt.datetime] = {}
    for job, at in exclusions:
        if job not in latest or at > latest[job]:
            latest[job] = at
    weight = 0.0
    counted = []
    for job, at in sorted(latest.items(), key=lambda item: item[1], reverse=True):
        age = max((now - at) / half_life, 0.0)
        if age > HORIZON_HALF_LIVES:
            continue
        weight += 0.5 ** age
        counted.append(job)
    return round(weight, 3), tuple(counted)


HISTORY_REASON = "excluded for "
"""How attribution's reason for a node suspect on its history alone begins."""


def counts_in_history(node: str, reasons: Iterable[str]) -> bool:
    """Whether an Advice that left `node` out, for these reasons of its suspect, counts in the node's
    history for other jobs: not when history was its only reason (a node once over the threshold
    would otherwise be left out by every later failing job, each of those exclusions keeping it there).
    The ledger adapter's node-history read applies the same rule to the Advice's evidence refs."""
    reasons = list(reasons)
    return not reasons or not all(r.startswith(HISTORY_REASON) for r in reasons)


def with_exclusions(history: dict[str, tuple[tuple[str, dt.datetime], ...]],
                    newer: dict[str, list[tuple[str, dt.datetime]]]) -> dict[str, tuple[tuple[str, dt.datetime], ...]]:
    """`history` (node -> (job, when), as read) with the exclusions `newer` of decisions taken since the
    read (a batch's earlier ones, newest first), so that each decision of a batch weighs the ones before
    it as if they had been committed one at a time; an equal time sorts the newest decision first."""
    if not newer:
        return history
    out = dict(history)
    for node, entries in newer.items():
        out[node] = tuple(entries) + tuple(history.get(node, ()))
    return out
