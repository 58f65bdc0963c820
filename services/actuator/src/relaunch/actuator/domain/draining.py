"""plan_drains(advice, conditions) -> the nodes to drain for a confirmed hardware fault;
plan_downs(advice, job_nodes, conditions) -> the lost nodes to mark DOWN. Pure.

Optional (RELAUNCH_ACTUATOR_DRAIN_NODES, off by default): excluding a node protects one job; a drain
keeps every job off it until an operator resumes it. Invariants:
- only nodes the Advice excludes, and only with hardware evidence in the Advice's own evidence refs
  (the decider writes `node:<name>:<confidence>:<reason>`) that the job's user does not control: a
  gpu-probe "failed" verdict. A log line whose signature puts the fault in the hardware domain is text
  the job printed (any user can print an XID line): it excludes the node from that job's restart, never
  drains it for everyone (docs/security.md). History alone ("excluded for other jobs") or a degraded
  reading is not a confirmed fault either;
- a node already drained or draining, by relaunch or by anyone, is left alone (idempotent, and an
  operator's reason is never overwritten); a node Slurm does not list is not drained;
- the reason names relaunch, the job and the evidence, is bounded and has only plain characters: it
  goes to Slurm as one argv element, and evidence may quote a log line.

A lost host (its gpu-probe fell silent while the job stopped: the detector's node_lost) keeps the job
COMPLETING, and so away from its restart, until Slurm itself marks the node DOWN after SlurmdTimeout
(300 s by default). Slurm ends that early when told the node is DOWN: it then requeues the job (as
for a node failure) and the restart goes on. That is a DOWN, bounded like a drain (on by default,
RELAUNCH_ACTUATOR_DOWN_LOST_NODES): only a node the Advice excludes with "lost" evidence, only while
the job still holds it, at most MAX_DOWNS_PER_ADVICE, never a node already down (by anyone). The
node comes back as Slurm's ReturnToService says once its slurmd is heard again, as after a node
failure Slurm found itself (docs/operator-guide.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from relaunch.common.schemas import Advice

from .observing import NodeCondition

HARDWARE_EVIDENCE = (
    re.compile(r"^gpu-probe: failed\b"),
)
"""Evidence reasons (as the decider's attribution words them) that confirm a hardware fault: the node's own
gpu-probe only, never the job's log text (see above)."""
MAX_REASON = 200
"""Slurm keeps the reason as given; bounded so that sinfo stays readable."""
MAX_DRAINS_PER_ADVICE = 2
"""A bound on the blast radius: one Advice never drains more nodes than this."""
LOST_EVIDENCE = re.compile(r"^lost: ")
"""The decider's reason for a node the detector found lost (attribution.py)."""
MAX_DOWNS_PER_ADVICE = 2
"""One Advice never marks more nodes DOWN than this."""
_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:;()/+#@-]+")


@dataclass(frozen=True)
class Drain:
    node: str
    reason: str
    state: str = "DRAIN"
    """DRAIN (a confirmed hardware fault) or DOWN (a lost node the job still holds)."""


def hardware_evidence(advice: Advice, patterns: tuple[re.Pattern, ...] = HARDWARE_EVIDENCE) -> dict[str, str]:
    """Excluded node -> the first evidence reason that confirms a hardware fault on it (or, with other
    `patterns`, the first that matches them)."""
    found: dict[str, str] = {}
    excluded = set(advice.exclude_nodes)
    for ref in advice.evidence_refs:
        kind, _, rest = ref.partition(":")
        if kind != "node":
            continue
        node, _, rest = rest.partition(":")
        _confidence, _, reason = rest.partition(":")
        if node in excluded and node not in found and any(p.search(reason) for p in patterns):
            found[node] = reason
    return found


def drain_reason(advice: Advice, evidence: str) -> str:
    text = _UNSAFE.sub("_", f"relaunch: job {advice.job_id} attempt {advice.attempt}: {evidence}")
    return text[:MAX_REASON].rstrip()


def plan_drains(advice: Advice, conditions: dict[str, NodeCondition]) -> list[Drain]:
    """The drains still to do, in node order (empty when every one is done or nothing qualifies)."""
    evidence = hardware_evidence(advice)
    todo = []
    for node in sorted(evidence)[:MAX_DRAINS_PER_ADVICE]:
        condition = conditions.get(node)
        if condition is None or condition.draining:
            continue
        todo.append(Drain(node, drain_reason(advice, evidence[node])))
    return todo


def lost_nodes(advice: Advice) -> dict[str, str]:
    """Excluded node -> the evidence that says it was lost."""
    return hardware_evidence(advice, (LOST_EVIDENCE,))


def plan_downs(advice: Advice, job_nodes: tuple[str, ...], conditions: dict[str, NodeCondition]) -> list[Drain]:
    """The lost nodes still to mark DOWN, in node order: those the job still holds and Slurm does not show
    down already."""
    evidence = lost_nodes(advice)
    todo = []
    for node in sorted(evidence)[:MAX_DOWNS_PER_ADVICE]:
        condition = conditions.get(node)
        if condition is None or condition.down or node not in job_nodes:
            continue
        todo.append(Drain(node, drain_reason(advice, evidence[node]), state="DOWN"))
    return todo
