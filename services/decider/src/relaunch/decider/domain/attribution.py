"""attribute(anomaly, job_nodes, node_events, now, ...) -> suspect nodes with reasons and confidences. Pure.

The evidence, and the confidence each gives (the highest of a node's reasons counts; docs/policy.md):
  0.9   gpu-probe read the node as failed in the window around the failure (an XID, ECC, a lost GPU);
        repeated readings of one fault are one reason, "..., seen 6x 05:45:34-05:46:24"
  0.8   the failing log line names the node and its signature says the fault is the node's
        (action restart_excluding: an XID, an ECC error in the log), a straggler's slow rank ran on it,
        or the node was lost (its gpu-probe fell silent while the job's progress stopped)
  0.75  the node's record of exclusions for other jobs, decayed with a half-life, still weighs at
        least HISTORY_WEIGHT (reputation.py; an operator's clearance forgets it)
  0.7   a hardware or infrastructure error in the log names the node (a NCCL/IB error's host); an
        InfiniBand completion error names a pair of hosts, and the policy's ib_pair says whether
        both ends are suspects or one (the end with other evidence, else the far end, the peer)
  0.5   gpu-probe read the node as degraded (thermal, power)
  0.4   the other end of an InfiniBand pair that ib_pair=one left in
  +0.2  (at most 0.95) the node was a suspect of the job's previous attempt too, and has evidence now
A log line that names every node of a multi-node job says nothing about which one is at fault: it
implicates none. Only nodes of the failed attempt can be suspects: excluding a node the job never ran
on changes nothing, and one Slurm does not know makes the update fail. Suspects at or above EXCLUDE_AT
are left out of the restart (capped, and never so many that the job cannot be scheduled: exclusions.py).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from relaunch.common.policies.model import IB_PAIRS
from relaunch.common.repeats import collapse
from relaunch.common.schemas import AnomalyDetected

from .reputation import HALF_LIFE, HISTORY_WEIGHT, history_weight

WINDOW = dt.timedelta(minutes=15)
"""gpu-probe readings this long before the anomaly (and up to its detection) count as evidence."""
EXCLUDE_AT = 0.7
"""Suspects at or above this confidence are excluded from the next attempt."""
CONSECUTIVE_BOOST = 0.2
"""Added to a suspect's confidence when the job's previous attempt implicated the node too."""
CONSECUTIVE_MAX = 0.95

_IB_PEER = re.compile(r"Got completion from peer (?P<peer>[A-Za-z][\w.-]{0,62})<\d{1,5}>")
_NCCL_PREFIX = re.compile(r"^(?:\[[^\]\n]{1,20}\]:? ?)?(?:\d{1,5}: )?"
                          r"(?P<local>[A-Za-z0-9][\w.-]{0,62}):\d{1,10}:\d{1,10} \[\d{1,4}\]")
"""NCCL's line prefix host:pid:tid [dev] names the host that printed the line (the local end)."""


@dataclass(frozen=True)
class NodeEvent:
    node: str
    verdict: str
    reasons: tuple[str, ...]
    at: dt.datetime


@dataclass(frozen=True)
class Suspect:
    node: str
    confidence: float
    reasons: tuple[str, ...]

    @property
    def excluded(self) -> bool:
        return self.confidence >= EXCLUDE_AT


def ib_pairs(lines: Iterable[str], members: Iterable[str]) -> list[tuple[str | None, str]]:
    """(local, peer) of each InfiniBand completion error in `lines` whose peer is a node of the job;
    local is None when the line does not say which host printed it (or it is not the job's)."""
    known = {_short(n): n for n in members}
    pairs: list[tuple[str | None, str]] = []
    for line in lines:
        found = _IB_PEER.search(line)
        peer = known.get(_short(found["peer"])) if found else None
        if peer is None:
            continue
        prefix = _NCCL_PREFIX.match(line)
        local = known.get(_short(prefix["local"])) if prefix else None
        pair = (local if local != peer else None, peer)
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def _short(host: str) -> str:
    return host.split(".", 1)[0]


def attribute(anomaly: AnomalyDetected, job_nodes: list[str], events: list[NodeEvent], now: dt.datetime,
              window: dt.timedelta = WINDOW,
              node_history: Mapping[str, Iterable[tuple[str, dt.datetime]]] | None = None,
              previous: Mapping[str, tuple[float, tuple[str, ...]]] | None = None,
              ib_pair: str = "both", half_life: dt.timedelta = HALF_LIFE) -> tuple[Suspect, ...]:
    """`node_history`: node -> (job, when) of each Advice of another job that left it out (since the
    node's last clearance); they count decayed by `half_life` (reputation.py). `previous`: node ->
    (confidence, reasons) of the suspects of the job's previous attempt. `ib_pair`: "both" or "one"."""
    if ib_pair not in IB_PAIRS:
        raise ValueError(f"ib_pair must be one of {', '.join(IB_PAIRS)}, not {ib_pair!r}")
    members = set(job_nodes) or set(anomaly.nodes)
    found: dict[str, tuple[float, list[str]]] = {}

    def add(node: str, confidence: float, reason: str) -> None:
        best, reasons = found.get(node, (0.0, []))
        found[node] = (max(best, confidence), reasons + [reason])

    # Evidence other than the log line first: it settles which end of an InfiniBand pair to blame.
    other: list[tuple[str, float, str]] = []
    for event in events:
        if event.node not in members or not (anomaly.detected_at - window <= event.at <= now):
            continue
        if event.verdict == "failed":
            other.append((event.node, 0.9, f"gpu-probe: failed at {event.at:%H:%M:%S}: "
                                           f"{'; '.join(event.reasons)[:300]}"))
        elif event.verdict == "degraded":
            other.append((event.node, 0.5, f"gpu-probe: degraded at {event.at:%H:%M:%S}: "
                                           f"{'; '.join(event.reasons)[:300]}"))
    for node, entries in (node_history or {}).items():
        if node not in members:  # (a batch's history holds the nodes its other decisions left out too)
            continue
        weight_now, jobs = history_weight(entries, now, half_life)
        if weight_now >= HISTORY_WEIGHT:
            # "excluded for" starts the reason: the ledger adapter recognises history-only exclusions by it.
            shown = ", ".join(jobs[:5])
            other.append((node, 0.75, f"excluded for {len(jobs)} other jobs ({shown}), weight {weight_now:.2f} "
                                      f"with a {half_life.total_seconds() / 3600:g} h half-life"))
    weight: dict[str, float] = {}
    for node, confidence, _ in other:
        weight[node] = max(weight.get(node, 0.0), confidence)
    for node, (confidence, _) in (previous or {}).items():
        weight[node] = max(weight.get(node, 0.0), min(confidence, 0.5))

    node_fault = anomaly.action == "restart_excluding"
    if node_fault or anomaly.fault_domain in ("hardware", "infrastructure"):
        named = [n for n in anomaly.nodes if n in members]
        what = (f"straggler: the slow rank ran on it ({anomaly.summary[:200]})" if anomaly.kind == "straggler"
                else f"lost: its gpu-probe fell silent while the job stopped ({anomaly.summary[:200]})"
                if anomaly.source == "node"
                else f"{anomaly.category} ({anomaly.fault_domain}) in the job's log names it")
        spared: dict[str, str] = {}
        pairs = ib_pairs((e.text for e in anomaly.evidence), members)
        named += [n for pair in pairs for n in pair if n is not None and n not in named]
        if ib_pair == "one":
            for local, peer in pairs:
                if local is None:
                    continue
                # The end with other evidence; without any, the far end (the peer, not the host
                # that printed the line).
                blamed = local if weight.get(local, 0.0) > weight.get(peer, 0.0) else peer
                spared.setdefault(local if blamed == peer else peer, blamed)
            spared = {n: b for n, b in spared.items() if n not in spared.values()}
            named = [n for n in named if n not in spared]
        # A line that names some nodes among several (a host, or both ends of a failed InfiniBand
        # transfer) is evidence; a node's own fault class on a one-node attempt is too. All nodes of
        # a multi-node job are not: excluding them all says nothing and may leave nothing to run on.
        if named and (len(named) < len(members) or (len(members) == 1 and node_fault)):
            for node in named:
                add(node, 0.8 if node_fault else 0.7, what)
            for node, blamed in spared.items():
                add(node, 0.4, f"the other end of a failed InfiniBand transfer with {blamed}; ib_pair=one "
                               f"blames {blamed}")
    for node, confidence, reason in other:
        add(node, confidence, reason)
    for node, (confidence, reasons) in found.items():
        if node in (previous or {}):
            before, why = previous[node]
            raised = max(confidence, min(confidence + CONSECUTIVE_BOOST, CONSECUTIVE_MAX))
            shown = "; ".join(why)[:200] or "no reason recorded"
            found[node] = (raised, reasons + [f"implicated in the previous attempt too ({before:.2f}: {shown})"])
    # One entry per fault: a reading gpu-probe repeated at every heartbeat is said once, with its
    # count and time span (relaunch.common.repeats).
    return tuple(sorted((Suspect(n, round(c, 2), tuple(collapse(r))) for n, (c, r) in found.items()),
                        key=lambda s: (-s.confidence, s.node)))
