"""The root cause of a failure, from the matched lines of a log. Pure.

Invariants:
- precedence goes by role, then by time: a decisive line (hardware fault, host OOM kill, node
  failure) beats every initiating error; an initiating error ("cause") beats every symptom (what
  victims print: collective timeouts, peers gone); symptoms beat teardown (what launchers print
  while stopping the job); advice is never a root cause. Within a role the earliest line wins:
  errors printed later are usually consequences of the first (a traceback's chained exceptions,
  the ranks that fail after their peer died);
- one incident per verdict: the same error on many ranks or nodes is one finding, and the finding
  names every rank and node seen with it;
- an application-class XID that several processes hit on one GPU is escalated to its class's
  `escalate_to` (a GPU that keeps faulting is a bad GPU, whatever the program);
- a failure whose own lines name no host and no address, and that blames a host (its action is
  restart_excluding; never an application error), is placed by the launchers' reports printed at or
  after its first line (`places` signatures: torchrun's error summary, srun's task lines, Cray MPICH's
  error prefix): the host of the failure's own ranks, else the one host those reports name, else none
  (docs/log-ingest.md, "Which host a line blames"). Only these few matches are looked at, never the
  log's other lines;
- memory is bounded whatever the number of matched lines (counts, capped sets and evidence).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .scanning import Match
from .signatures import Signature

ROLE_ORDER = {"decisive": 0, "cause": 1, "symptom": 2, "teardown": 3}
EVIDENCE_MAX = 5
EVIDENCE_CHARS = 500
"""An evidence line is cut here: it is read by a person (the head of a line says what it is)."""
_NODES_MAX = 256
_RANKS_MAX = 4096
_PLACES_MAX = 256
"""Launchers' reports of where ranks ran that are kept (the first ones: a summary follows its failure)."""


@dataclass(frozen=True)
class Evidence:
    index: int
    """Position of the line in what was scanned."""
    text: str


@dataclass(frozen=True)
class Classification:
    signature_id: str
    category: str
    fault_domain: str
    action: str
    role: str
    cascade: bool
    """True when only a symptom or teardown explains the failure (something better may still come)."""
    summary: str
    nodes: tuple[str, ...]
    """Culprit nodes named by the lines, in order of appearance."""
    ranks: tuple[int, ...]
    evidence: tuple[Evidence, ...]
    """The first line of the incident, then lines that add a rank or a node (at most EVIDENCE_MAX)."""
    lines: int
    """How many lines the incident spans."""
    kind: str = "crash"
    """crash (a signature), or divergence (verdicts.py: from progress lines, as the detector's tracker)."""
    addresses: tuple[str, ...] = ()
    """Addresses the lines blame (scanning.Match.addresses), in order: node names only once mapped with
    the job's NodeAddr (peers.nodes_named; the live detector does, `relaunch classify` cannot)."""


class _Incident:
    """Accumulates one verdict's lines (private, mutable while folding; never escapes)."""

    __slots__ = ("signature", "first", "lines", "nodes", "ranks", "evidence", "events", "addresses")

    def __init__(self, signature: Signature, first: int) -> None:
        self.signature, self.first, self.lines = signature, first, 0
        self.nodes: dict[str, None] = {}
        self.addresses: dict[str, None] = {}
        self.ranks: set[int] = set()
        self.evidence: list[Evidence] = []
        self.events: set[str] = set()

    def add(self, match: Match) -> None:
        self.lines += 1
        new_place = (any(n not in self.nodes for n in match.nodes) or any(r not in self.ranks for r in match.ranks)
                     or any(a not in self.addresses for a in match.addresses))
        for node in match.nodes:
            if len(self.nodes) < _NODES_MAX:
                self.nodes.setdefault(node)
        for address in match.addresses:
            if len(self.addresses) < _NODES_MAX:
                self.addresses.setdefault(address)
        for rank in match.ranks:
            if len(self.ranks) < _RANKS_MAX:
                self.ranks.add(rank)
        if len(self.events) < max(self.signature.escalate_after, 1) and match.event is not None:
            self.events.add(match.event)
        if len(self.evidence) < EVIDENCE_MAX and (not self.evidence or new_place):
            text = readable(match.text)
            if not any(e.text == text for e in self.evidence):
                self.evidence.append(Evidence(match.index, text))

    def absorb(self, other: _Incident) -> None:
        self.first = min(self.first, other.first)
        self.lines += other.lines
        for node in other.nodes:
            if len(self.nodes) < _NODES_MAX:
                self.nodes.setdefault(node)
        for address in other.addresses:
            if len(self.addresses) < _NODES_MAX:
                self.addresses.setdefault(address)
        self.ranks |= set(list(other.ranks)[: max(0, _RANKS_MAX - len(self.ranks))])
        merged = sorted({e.text: e for e in [*other.evidence, *self.evidence]}.values(), key=lambda e: e.index)
        self.evidence = merged[:EVIDENCE_MAX]

    def escalated(self) -> Signature:
        sig = self.signature
        return sig.escalate_to if sig.escalate_to and len(self.events) >= sig.escalate_after else sig


def readable(text: str) -> str:
    """One evidence line as a person reads it: of a line redrawn with '\r' (a progress bar with the error
    printed after it) the frames that are not bar redraws, and at most EVIDENCE_CHARS characters."""
    if "\r" in text:
        frames = [f.strip() for f in text.split("\r") if f.strip()]
        kept = [f for f in frames if "%|" not in f and "it/s]" not in f and "s/it]" not in f] or frames[-1:]
        text = " ".join(dict.fromkeys(kept))
    text = text.strip()
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


class _Place:
    """One launcher report of where ranks ran: its line, its hosts and the ranks it names."""

    __slots__ = ("match", "nodes", "ranks")

    def __init__(self, match: Match) -> None:
        self.match, self.nodes, self.ranks = match, match.nodes, set(match.ranks)


def _placed(places: list[_Place], first: int, ranks: Iterable[int]) -> tuple[tuple[str, ...], list[Match]]:
    """The hosts the reports at or after line `first` give the failure: those of reports that name one of
    its ranks, else the only host the reports name; with the report lines that say so."""
    after = [p for p in places if p.match.index >= first and p.nodes]
    wanted = set(ranks)
    chosen = [p for p in after if p.ranks & wanted] if wanted else []
    if not chosen and len({n for p in after for n in p.nodes}) == 1:
        chosen = after
    return tuple(dict.fromkeys(n for p in chosen for n in p.nodes)), [p.match for p in chosen]


def classify(matches: Iterable[Match]) -> Classification | None:
    """The root cause among the matched lines, or None when no line explains a failure."""
    incidents: dict[tuple[str, str | None], _Incident] = {}
    places: list[_Place] = []
    previous: Match | None = None
    for match in matches:
        sig = match.signature
        if sig.places and len(places) < _PLACES_MAX:
            # torchrun's summary prints an entry's host, then its rank on the next line: a rank-only report
            # right after a host-only one completes it.
            if (not match.nodes and match.ranks and previous is not None and places
                    and places[-1].match is previous and not places[-1].ranks):
                places[-1].ranks.update(match.ranks)
            else:
                places.append(_Place(match))
        previous = match
        if sig.role not in ROLE_ORDER:
            continue  # advice is never a root cause
        # Escalating XID classes are counted per GPU: repeats on one GPU, not across the machine.
        key = (sig.id, match.gpu if sig.escalate_to else None)
        incident = incidents.get(key)
        if incident is None:
            incident = incidents[key] = _Incident(sig, match.index)
        incident.add(match)
    if not incidents:
        return None
    verdicts: dict[str, _Incident] = {}
    for incident in incidents.values():
        verdict = incident.escalated()
        if verdict.id in verdicts:
            verdicts[verdict.id].absorb(incident)
        else:
            incident.signature = verdict
            verdicts[verdict.id] = incident
    winner = min(verdicts.values(), key=lambda i: (ROLE_ORDER[i.signature.role], i.first))
    sig = winner.signature
    if (sig.action == "restart_excluding" and sig.fault_domain != "application" and places
            and not winner.nodes and not winner.addresses):
        nodes, said = _placed(places, winner.first, winner.ranks)
        winner.nodes.update(dict.fromkeys(nodes[:_NODES_MAX]))
        for match in said:
            if len(winner.evidence) < EVIDENCE_MAX and all(e.index != match.index for e in winner.evidence):
                winner.evidence.append(Evidence(match.index, readable(match.text)))
    return Classification(
        signature_id=sig.id, category=sig.category, fault_domain=sig.fault_domain, action=sig.action,
        role=sig.role, cascade=sig.cascade, summary=sig.summary, nodes=tuple(winner.nodes),
        ranks=tuple(sorted(winner.ranks)), evidence=tuple(winner.evidence), lines=winner.lines,
        addresses=tuple(winner.addresses),
    )
