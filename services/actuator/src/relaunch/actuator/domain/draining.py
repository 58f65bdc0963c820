"""plan_drains(advice, conditions) -> the nodes to drain for a confirmed hardware fault. Pure.

Optional (RELAUNCH_ACTUATOR_DRAIN_NODES, off by default): excluding a node protects one job; a drain
keeps every job off it until an operator resumes it. Invariants:
- only nodes the Advice excludes, and only with hardware evidence in the Advice's own evidence refs
  (the decider writes `node:<name>:<confidence>:<reason>`): a gpu-probe "failed" verdict, or a log
  line whose signature puts the fault in the hardware domain. History alone ("excluded for other
  jobs") or a degraded reading is not a confirmed fault;
- a node already drained or draining, by relaunch or by anyone, is left alone (idempotent, and an
  operator's reason is never overwritten); a node Slurm does not list is not drained;
- the reason names relaunch, the job and the evidence, is bounded and has only plain characters: it
  goes to Slurm as one argv element, and evidence may quote a log line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from relaunch.common.schemas import Advice

from .observing import NodeCondition

HARDWARE_EVIDENCE = (
    re.compile(r"^gpu-probe: failed\b"),
    re.compile(r"\(hardware\) in the job's log names it$"),
)
"""Evidence reasons (as the decider's attribution words them) that confirm a hardware fault."""
MAX_REASON = 200
"""Slurm keeps the reason as given; bounded so that sinfo stays readable."""
MAX_DRAINS_PER_ADVICE = 2
"""A bound on the blast radius: one Advice never drains more nodes than this."""
_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:;()/+#@-]+")


@dataclass(frozen=True)
class Drain:
    node: str
    reason: str


def hardware_evidence(advice: Advice) -> dict[str, str]:
    """Excluded node -> the first evidence reason that confirms a hardware fault on it."""
    found: dict[str, str] = {}
    excluded = set(advice.exclude_nodes)
    for ref in advice.evidence_refs:
        kind, _, rest = ref.partition(":")
        if kind != "node":
            continue
        node, _, rest = rest.partition(":")
        _confidence, _, reason = rest.partition(":")
        if node in excluded and node not in found and any(p.search(reason) for p in HARDWARE_EVIDENCE):
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
