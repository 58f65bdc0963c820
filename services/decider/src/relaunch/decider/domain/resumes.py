"""Whether a restarted attempt resumed from the checkpoint its restart Advice expected (Advice.resume_step,
docs/goodput.md). Pure: the ledger's note is the decider's audit entry `resumed`.

Invariants: judged once per attempt, on its first fact that says where it began (a checkpoint load line,
else its first step); a first step is "as expected" at or past the expected checkpoint (frameworks print
their first step a log interval after it), a load line only at exactly that step.
"""

from __future__ import annotations

import json

from relaunch.common.schemas import CheckpointFact


def resumed(fact: CheckpointFact, expected: int) -> dict | None:
    """The audit detail for `fact` (a successor's load line or first step), or None when the fact says
    nothing of where the attempt began."""
    if fact.kind not in ("loaded", "first_step") or fact.step is None:
        return None
    ok = fact.step == expected if fact.kind == "loaded" else fact.step >= expected
    how = "loaded the checkpoint of step" if fact.kind == "loaded" else "began at step"
    words = (f"attempt {fact.attempt} {how} {fact.step}: "
             + ("resumed from the checkpoint expected" if ok else "not the checkpoint expected")
             + f" (step {expected}, the last saved before attempt {fact.attempt - 1} failed)")
    return {"attempt": fact.attempt, "expected_step": expected, "step": fact.step, "by": fact.kind,
            "as_expected": ok, "reason": words}


def detail_text(detail: dict) -> str:
    return json.dumps(detail)
