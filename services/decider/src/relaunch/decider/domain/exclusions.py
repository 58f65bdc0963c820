"""plan_exclusions(): which suspects a restart leaves out, so that the job can still be scheduled. Pure.

Invariants (tests/unit/test_decider_exclusions.py, and the property tests):
- at most `cap` nodes are left out of one restart (the policy's max_exclude);
- when the partition's usable node count is known, the job keeps room to run:
      job_size <= partition_nodes - |excluded_before ∪ kept|
  where excluded_before are the nodes earlier restarts of this job already left out (Slurm keeps a
  job's ExcNodeList, and the actuator only adds to it). Every excluded node is counted as a usable
  node of the partition: a drained one is not in partition_nodes and so is counted twice, which can
  only make the guard keep a suspect it could have left out, never the reverse;
- suspects are given up lowest confidence first (ties: the later one in the given order), and every
  one given up is named, with why, so the Advice's reason and the audit say so;
- partition_nodes unknown (None): the cap alone applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ExclusionPlan:
    kept: tuple[str, ...]
    """The nodes to leave out of the restart, most confident first."""
    capped: tuple[str, ...] = ()
    """Suspects given up because the policy's max_exclude was reached."""
    unschedulable: tuple[str, ...] = ()
    """Suspects given up because leaving them out too would leave the job too few nodes to run on."""
    note: str = ""
    """What was given up and why ('' when nothing was)."""


def plan_exclusions(candidates: Sequence[tuple[str, float | None]], cap: int, job_size: int,
                    partition_nodes: int | None, excluded_before: Iterable[str] = (),
                    partition: str = "") -> ExclusionPlan:
    """`candidates`: (node, confidence) of the suspects confident enough to leave out, in the order
    to prefer them (None: confidence not known, the given order decides); `job_size`: nodes the job
    runs on; `partition_nodes`: the partition's usable nodes now, None when unknown."""
    if cap < 0 or job_size < 0 or (partition_nodes is not None and partition_nodes < 0):
        raise ValueError(f"cap, job_size and partition_nodes must not be negative: {cap}, {job_size}, "
                         f"{partition_nodes}")
    confidence = dict(candidates)
    # Stable: equal (or unknown) confidences keep their given order.
    ordered = sorted(dict.fromkeys(n for n, _ in candidates), key=lambda n: -(confidence[n] or 0.0))
    kept, capped = list(ordered[:cap]), tuple(ordered[cap:])
    before = set(excluded_before)
    dropped: list[str] = []
    notes: list[str] = []
    if capped:
        notes.append(f"left in {_named(capped, confidence)}: at most {cap} node(s) are left out of one "
                     "restart (max_exclude)")
    if partition_nodes is not None:
        # Nodes already left out cost nothing more; each new one takes one node from the room left.
        room = max(partition_nodes - job_size - len(before), 0)
        while sum(n not in before for n in kept) > room:
            victim = next(n for n in reversed(kept) if n not in before)  # the least confident new one
            kept.remove(victim)
            dropped.append(victim)
        if dropped:
            where = f"partition {partition!r}" if partition else "the job's partition"
            already = f", {len(before)} already left out by earlier restarts" if before else ""
            notes.append(f"left in {_named(dropped, confidence)}: {where} has {partition_nodes} usable node(s), "
                         f"the job needs {job_size}{already}; leaving out more would leave it unable to run")
    return ExclusionPlan(tuple(kept), capped, tuple(dropped), "; ".join(notes))


def _named(nodes: Iterable[str], confidence: dict[str, float | None]) -> str:
    return ", ".join(n if confidence.get(n) is None else f"{n} ({confidence[n]:.2f})" for n in nodes)
