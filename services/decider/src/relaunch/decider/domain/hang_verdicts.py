"""What hang evidence (HangEvidence, read from outside the job by the actuator) changes in a hang's
decision (docs/architecture.md, "Hang evidence"; docs/policy.md). Pure.

- evidence that points at the NODE makes each suspect node a suspect at NODE_CONFIDENCE, enough to be
  left out of the restart (attribution.EXCLUDE_AT), capped like every exclusion (exclusions.py). It is
  not corroborating (reputation.py): the job's own code decides where its ranks stop, so it never counts
  against the node for other users' jobs on its own;
- evidence that points at the USER'S CODE at the same place (file:line (function)) as the attempt
  before's evidence did is a deadlock in the program: `deadlock` says so, and the policy stops the job;
- "none" and "unclear" (every rank waiting in the same place, or no evidence at all) change nothing:
  the hang is handled as it was without evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

from .attribution import Suspect

NODE_CONFIDENCE = 0.8
"""As a straggler's slow rank: the job's ranks, read from outside, name the node."""


def with_hang_suspects(suspects: Sequence[Suspect], evidence: dict | None, job_nodes: Sequence[str]) -> list[Suspect]:
    """`suspects` with the nodes the evidence blames (only the attempt's own nodes)."""
    out = list(suspects)
    if not evidence or evidence.get("status") != "collected" or evidence.get("blame") != "node":
        return out
    reason = f"hang evidence: {evidence.get('reason', '')}"[:500]
    for node in evidence.get("suspect_nodes", []):
        if node not in job_nodes:
            continue
        known = next((i for i, s in enumerate(out) if s.node == node), None)
        if known is None:
            out.append(Suspect(node, NODE_CONFIDENCE, (reason,)))
        else:
            s = out[known]
            out[known] = Suspect(node, max(s.confidence, NODE_CONFIDENCE), (*s.reasons, reason))
    return out


def deadlock(evidence: dict | None, place_before: str | None) -> str | None:
    """The reason to stop when the evidence blames the user's code where the attempt before's did."""
    if not evidence or evidence.get("blame") != "user_code" or not evidence.get("place"):
        return None
    if evidence["place"] != place_before:
        return None
    return (f"hung in the program's own code at the same place in two attempts ({evidence['place']}): "
            f"{evidence.get('reason', '')}; a restart would hang there again")[:4000]
