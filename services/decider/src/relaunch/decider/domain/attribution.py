"""attribute(anomaly, job_nodes, node_events, now, ...) -> suspect nodes with reasons and confidences. Pure.

The evidence, and the confidence each gives (the highest of a node's reasons counts; docs/policy.md):
  0.9   gpu-probe read the node as failed in the window around the failure (an XID, ECC, a lost GPU);
        repeated readings of one fault are one reason, "..., seen 6x 05:45:34-05:46:24"
  0.8   the failing log line names the node and its signature says the fault is the node's
        (action restart_excluding: an XID, an ECC error in the log), a straggler's slow rank ran on it,
        the node was lost (its gpu-probe fell silent while the job's progress stopped), or Slurm says
        the attempt ended NODE_FAIL (BOOT_FAIL) and the node is its only one
  0.75  the node's record of exclusions for other jobs passes reputation.py's rules (weight, and more
        than one user's word behind it; an operator's clearance forgets it)
  0.7   a hardware or infrastructure error in the log names the node (a NCCL/IB error's host); an
        InfiniBand completion error names a pair of hosts, and the policy's ib_pair says whether
        both ends are suspects or one (the end with other evidence, else the far end, the peer)
  0.5   gpu-probe read the node as degraded (thermal, power)
  0.4   the other end of an InfiniBand pair that ib_pair=one left in
  +0.2  (at most 0.95) the node was a suspect of the job's previous attempt too, and has evidence now
  0     a hint, shown and kept but never a reason to leave a node out: a log line names a node the job
        did not run on, or a node's history that one user's log text alone stands behind

Whose word it is (docs/policy.md, "Node history"): a job's log and progress reports are its owner's
text, which the owner controls. gpu-probe readings, a lost node and Slurm's own states are not; their
reasons begin with reputation.CORROBORATING, and only they make an exclusion count in the node's
history for other users' jobs without a second user. Which hosts a log line names is read again here
from its text with the signature catalogue's own locators (the detector hands the job's nodes on when a
line names none of them, so its node list alone cannot tell "names node3" from "names no host").

Invariants:
- only nodes of the failed attempt can be suspects: excluding a node the job never ran on changes
  nothing, and one Slurm does not know makes the update fail; a line naming another node is a hint;
- a log line that names every node of a multi-node job says nothing about which one is at fault: it
  implicates none;
- Slurm's "*** STEP 2.0 ON node3 CANCELLED AT ... DUE TO NODE FAILURE ***" is printed by a survivor
  (slurmctld tells the nodes it still reaches to end the step): it implicates no node, whatever a
  catalogue locates in it; the failed node comes from Slurm's NODE_FAIL, the node's Slurm state (the
  detector names the job's nodes Slurm shows DOWN / NOT_RESPONDING, JobObserved.nodes_down) and the node's silence;
- the job's own text is evidence for its own restart (its own XID line on its own node leaves that
  node out of its restart), never on its own against other users (reputation.py);
- suspects at or above EXCLUDE_AT are left out of the restart (capped, and never so many that the job
  cannot be scheduled: exclusions.py).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from relaunch.common.diagnosis.scanning import Scanner, scanner_for
from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.common.policies.model import IB_PAIRS
from relaunch.common.repeats import collapse
from relaunch.common.schemas import AnomalyDetected

from .reputation import HALF_LIFE, HISTORY_WEIGHT, corroborates, standing

WINDOW = dt.timedelta(minutes=15)
"""gpu-probe readings this long before the anomaly (and up to its detection) count as evidence."""
EXCLUDE_AT = 0.7
"""Suspects at or above this confidence are excluded from the next attempt."""
CONSECUTIVE_BOOST = 0.2
"""Added to a suspect's confidence when the job's previous attempt implicated the node too."""
CONSECUTIVE_MAX = 0.95
SLURM_NODE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
"""Attempt states in which Slurm itself says a node of the job failed."""

_IB_PEER = re.compile(r"Got completion from peer (?P<peer>[A-Za-z][\w.-]{0,62})<\d{1,5}>")
_NCCL_PREFIX = re.compile(r"^(?:\[[^\]\n]{1,20}\]:? ?)?(?:\d{1,5}: )?"
                          r"(?P<local>[A-Za-z0-9][\w.-]{0,62}):\d{1,10}:\d{1,10} \[\d{1,4}\]")
"""NCCL's line prefix host:pid:tid [dev] names the host that printed the line (the local end)."""
_SURVIVOR = re.compile(r"\bCANCELLED AT [^*\n]{0,80}DUE TO NODE FAIL")
"""Slurm's step or job cancelled for a node failure: the host it names ("ON node3") is one that survived
(src/slurmd/slurmstepd/req.c prints it where slurmctld's kill request arrived)."""
_SURVIVOR_HOST = re.compile(r"\bON (?P<host>[A-Za-z0-9][\w.-]{0,62}) CANCELLED AT [^*\n]{0,80}DUE TO NODE FAIL")


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

    @property
    def corroborated(self) -> bool:
        """Some reason is not the job's own text: gpu-probe, a lost node, Slurm (reputation.CORROBORATING)."""
        return any(corroborates(r) for r in self.reasons)


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


@functools.cache
def _scanner() -> Scanner:
    """The built-in catalogue's scanner, built once (about 0.2 s) at the first log line read."""
    return scanner_for(builtin_catalogue())


def hosts_named(lines: Iterable[str]) -> tuple[str, ...]:
    """The hosts `lines` name, as the detector reads them: a signature's node group and the catalogue's
    locators (syslog host, NCCL prefix, IB peer, Slurm's "ON host", "Node failure on host"...), short names."""
    names: dict[str, None] = {}
    for line in lines:
        found = _scanner().match_line(line, 0)
        if found is not None:
            names.update(dict.fromkeys(found.nodes))
    return tuple(names)


def attribute(anomaly: AnomalyDetected, job_nodes: list[str], events: list[NodeEvent], now: dt.datetime,
              window: dt.timedelta = WINDOW,
              node_history: Mapping[str, Iterable[tuple]] | None = None,
              previous: Mapping[str, tuple[float, tuple[str, ...]]] | None = None,
              ib_pair: str = "both", half_life: dt.timedelta = HALF_LIFE, slurm_state: str = "") -> tuple[Suspect, ...]:
    """`node_history`: node -> reputation.Exclusion (or (job, when)) of each Advice of another job that
    left it out (since the node's last clearance); reputation.standing weighs them. `previous`: node ->
    (confidence, reasons) of the suspects of the job's previous attempt. `ib_pair`: "both" or "one".
    `slurm_state`: the failed attempt's state as Slurm reported it ('' when not known)."""
    if ib_pair not in IB_PAIRS:
        raise ValueError(f"ib_pair must be one of {', '.join(IB_PAIRS)}, not {ib_pair!r}")
    members = set(job_nodes) or set(anomaly.nodes)
    previous = {n: v for n, v in (previous or {}).items() if v[0] > 0}  # hints implicate nothing
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
        if node not in members:  # (a batch's node history holds the nodes its other decisions left out too)
            continue
        said = standing(entries, now, half_life)
        shown = ", ".join(said.jobs[:5])
        whose = (f"{said.users} different known user(s), {said.corroborated} corroborated by gpu-probe or Slurm; "
                 f"weight {said.weight:.2f} with a {half_life.total_seconds() / 3600:g} h half-life")
        if said.suspect:
            # "excluded for" starts the reason: the ledger adapter recognises history-only exclusions by it.
            other.append((node, 0.75, f"excluded for {len(said.jobs)} other jobs ({shown}): {whose}"))
        elif said.weight >= HISTORY_WEIGHT:
            other.append((node, 0.0, f"node history (a hint): {len(said.jobs)} other jobs ({shown}) left it out "
                                     f"on their own log text only: {whose}; one user's word is not enough"))
    weight: dict[str, float] = {}
    for node, confidence, _ in other:
        weight[node] = max(weight.get(node, 0.0), confidence)
    for node, (confidence, _) in previous.items():
        weight[node] = max(weight.get(node, 0.0), min(confidence, 0.5))

    node_fault = anomaly.action == "restart_excluding"
    slurm_failed = slurm_state in SLURM_NODE_STATES and anomaly.source != "scheduler"
    if node_fault or anomaly.fault_domain in ("hardware", "infrastructure"):
        named, hints = _named(anomaly, members)
        what = (f"straggler: the slow rank ran on it ({anomaly.summary[:200]})" if anomaly.kind == "straggler"
                else f"lost: its gpu-probe fell silent while the job stopped ({anomaly.summary[:200]})"
                if anomaly.source == "node"
                else f"Slurm: {anomaly.summary[:200]}"
                if anomaly.source == "scheduler" or _slurm_down(anomaly, members)
                else f"{anomaly.category} ({anomaly.fault_domain}) in the job's log names it")
        for node in hints:
            add(node, 0.0, f"a hint: {anomaly.category} ({anomaly.fault_domain}) in the job's log names it, but "
                           "the job did not run on it")
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
                if slurm_failed:  # Slurm's word that a node of the job failed backs the line naming this one
                    add(node, 0.8 if node_fault else 0.7,
                        f"Slurm: the attempt ended {slurm_state}, and the job's log names this node")
            for node, blamed in spared.items():
                add(node, 0.4, f"the other end of a failed InfiniBand transfer with {blamed}; ib_pair=one "
                               f"blames {blamed}")
    if slurm_failed and len(members) == 1:
        (node,) = members
        add(node, 0.8, f"Slurm: the attempt ended {slurm_state} on its only node")
    for node, confidence, reason in other:
        add(node, confidence, reason)
    for node, (confidence, reasons) in found.items():
        if node in previous and confidence > 0:
            before, why = previous[node]
            raised = max(confidence, min(confidence + CONSECUTIVE_BOOST, CONSECUTIVE_MAX))
            shown = "; ".join(why)[:200] or "no reason recorded"
            found[node] = (raised, reasons + [f"implicated in the previous attempt too ({before:.2f}: {shown})"])
    # One entry per fault: a reading gpu-probe repeated at every heartbeat is said once, with its
    # count and time span (relaunch.common.repeats).
    return tuple(sorted((Suspect(n, round(c, 2), tuple(collapse(r))) for n, (c, r) in found.items()),
                        key=lambda s: (-s.confidence, s.node)))


def _slurm_down(anomaly: AnomalyDetected, members: set[str]) -> bool:
    """A log anomaly of survivors' node-failure lines only, whose nodes the detector narrowed to some of the
    job's that Slurm shows down: Slurm's word on which node failed, not the job's text. A node such a line
    names ("ON node3") survived, so nodes that include one are not that (an old detector's locator)."""
    if anomaly.source != "log" or not anomaly.evidence or not all(_SURVIVOR.search(e.text) for e in anomaly.evidence):
        return False
    named = set(anomaly.nodes) & members
    survivors = {_short(m["host"]) for e in anomaly.evidence for m in _SURVIVOR_HOST.finditer(e.text)}
    return 0 < len(named) < len(members) and not named & survivors


def _named(anomaly: AnomalyDetected, members: set[str]) -> tuple[list[str], list[str]]:
    """(nodes of the job the anomaly names, hosts its log lines name that are not the job's). For a log
    anomaly whose lines name hosts, those decide: the detector's list is the job's every node when the
    lines name none of them, which must not turn "names node3" into "names this job's node". Its
    list is still used where it names some nodes among several (a catalogue this service lacks)."""
    culprits = [n for n in anomaly.nodes if n in members]
    if anomaly.source != "log":
        return culprits, []
    texts = [e.text for e in anomaly.evidence if not _SURVIVOR.search(e.text)]
    if anomaly.evidence and not texts:
        # Only survivors' lines, which name no failed node: the detector's nodes are the job's, or some
        # of them that Slurm shows down (JobObserved.nodes_down; detection.crash_anomaly says so).
        return (culprits if _slurm_down(anomaly, members) else []), []
    hosts = hosts_named(texts)
    if not hosts:
        return culprits, []
    known = {_short(n): n for n in members}
    named = [known[h] for h in hosts if h in known]
    if len(set(culprits)) < len(members):
        named += [n for n in culprits if n not in named]
    return named, [h for h in hosts if h not in known]
