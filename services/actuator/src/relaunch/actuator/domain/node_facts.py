"""What the observer reports of the cluster's nodes, from one listing: usable nodes per partition, each
node's NodeAddr, and the nodes Slurm has given up on. Pure.

One `sinfo -h -N -o '%R|%N|%t|%o'` (or slurmrestd's `GET /slurm/V/nodes/`), the call the observer already
made for the partition sizes, now with the address; reused for observer.NODES_TTL_S. Its text is the same
on 22.05, 24.11 and 26.05 (docs/slurm-versions.md); slurmrestd's node objects carry `address` and a
`state` list (["IDLE", "NOT_RESPONDING"]) on every data_parser relaunch reads (v0.0.40-v0.0.45).

- NodeAddr (JobObserved.node_addrs) is how the detector turns an address a log line blames into a Slurm
  node name (docs/log-ingest.md, "Which host a line blames"). Where NodeAddr is unset Slurm prints the
  node's name, which maps to itself.
- Down (JobObserved.nodes_down): Slurm's DOWN or FAIL (FAILING), or a node flagged not responding ('*' in
  sinfo's short state, NOT_RESPONDING in slurmrestd's). A node lost mid-job is marked so by slurmctld
  (after SlurmdTimeout) or by relaunch itself (draining.py), and the step's survivors then print
  "*** STEP ... ON <survivor> CANCELLED AT ... DUE TO NODE FAILURE": the failed node is the down one.
  A drain is not down: the node still runs its jobs to their end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .observing import USABLE_NODE_STATES

_FLAGS = "*~#!%$@^-+"
"""sinfo's suffixes on a short state ('*': not responding; observing._NODE_STATE_FLAGS)."""
DOWN_STATES = frozenset({"down", "fail", "failg"})
"""Short sinfo states (%t) of a node Slurm has given up on."""
DOWN_FLAGS = frozenset({"DOWN", "FAIL", "NOT_RESPONDING"})
"""slurmrestd's state words of the same."""


@dataclass(frozen=True)
class NodeFacts:
    usable: dict[str, int] = field(default_factory=dict)
    """Partition -> nodes that can run jobs now."""
    addrs: dict[str, str] = field(default_factory=dict)
    """Node -> NodeAddr."""
    down: frozenset[str] = frozenset()

    def addrs_of(self, nodes: Iterable[str]) -> dict[str, str]:
        return {n: self.addrs[n] for n in nodes if n in self.addrs}

    def down_of(self, nodes: Iterable[str]) -> list[str]:
        return [n for n in nodes if n in self.down]


def facts_from_sinfo(text: str) -> NodeFacts:
    """`sinfo -h -N -o '%R|%N|%t|%o'` -> NodeFacts (a node in several partitions is listed once per partition)."""
    usable: dict[str, set[str]] = {}
    addrs: dict[str, str] = {}
    down: set[str] = set()
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or not parts[0] or not parts[1]:
            continue
        partition, node, state, addr = parts
        usable.setdefault(partition, set())
        if state in USABLE_NODE_STATES:
            usable[partition].add(node)
        if state.rstrip(_FLAGS) in DOWN_STATES or "*" in state:
            down.add(node)
        if addr and addr not in ("(null)", "N/A"):
            addrs[node] = addr
    return NodeFacts({p: len(n) for p, n in usable.items()}, addrs, frozenset(down))


def down_in_rest(states: Iterable[str]) -> bool:
    """A slurmrestd node `state` list that says Slurm has given up on the node."""
    return bool(DOWN_FLAGS & set(states))
