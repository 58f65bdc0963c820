"""decide(history, anomaly, policy, now) -> Decision. Pure; every stop names its rule.

Here the policy knows `max_attempts` (attempts in all, the first included), the anomaly's own
action (`stop` for faults that a restart cannot fix), observe-only jobs, straggler recovery as an
opt-in (otherwise a straggler is only reported), and that one attempt gets at most one decision.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

from relaunch.common.schemas import AnomalyDetected

from .attribution import Suspect

ADVICE_TTL = dt.timedelta(minutes=30)
"""An Advice not carried out within this time is abandoned as expired."""


@dataclass(frozen=True)
class Policy:
    max_attempts: int = 3
    straggler: bool = False
    """Restart on a straggler (opt-in per job); otherwise a straggler is only reported."""
    observe_only: bool = False
    option_errors: tuple[str, ...] = ()
    max_exclude: int = 2
    """At most this many nodes are excluded per job (a cap on the blast radius of one attribution)."""

    def as_dict(self) -> dict[str, int | bool]:
        return {"max_attempts": self.max_attempts, "straggler": self.straggler, "observe_only": self.observe_only}


@dataclass(frozen=True)
class History:
    """What the ledger knows of the job when the anomaly arrives."""

    decided_attempts: frozenset[int] = field(default_factory=frozenset)
    last_generation: int = 0
    user_cancelled: bool = False


@dataclass(frozen=True)
class Decision:
    kind: Literal["restart", "stop", "observe", "report", "none"]
    rule: str
    reason: str
    generation: int = 0
    exclude_nodes: tuple[str, ...] = ()
    expires_at: dt.datetime | None = None


def decide(history: History, anomaly: AnomalyDetected, policy: Policy, now: dt.datetime,
           suspects: tuple[Suspect, ...] | None = None) -> Decision:
    """`suspects` come from attribution; those confident enough are excluded (capped by policy).
    None (no attribution ran) falls back to the anomaly's own node hints."""
    attempt = anomaly.attempt
    if attempt in history.decided_attempts:
        return Decision("none", "already_decided", f"attempt {attempt} already has a decision")
    if policy.observe_only:
        return Decision("observe", "observe_only",
                        "the job's relaunch options are invalid, so it is only observed: "
                        + "; ".join(policy.option_errors))
    if anomaly.kind == "straggler" and not policy.straggler:
        return Decision("report", "straggler_report_only",
                        f"straggler reported, not acted on (the job's comment does not say straggler=on): "
                        f"{anomaly.summary}")
    if history.user_cancelled:
        return Decision("stop", "user_cancelled", "the job was cancelled by a user; relaunch never restarts that")
    if anomaly.action == "stop":
        return Decision("stop", "fault_not_restartable",
                        f"{anomaly.category} ({anomaly.fault_domain} fault): a restart would fail the same way")
    used = attempt + 1
    if used >= policy.max_attempts:
        return Decision("stop", "max_attempts",
                        f"max_attempts={policy.max_attempts} reached: attempt {used} of {policy.max_attempts} "
                        f"failed ({anomaly.category})")
    if suspects is not None:
        exclude = tuple(s.node for s in suspects if s.excluded)[: policy.max_exclude]
    else:
        exclude = tuple(anomaly.nodes) if anomaly.action == "restart_excluding" else ()
    why = "".join(f"; without {s.node}: {', '.join(s.reasons)}" for s in suspects or () if s.node in exclude)
    return Decision(
        "restart", "within_budget",
        f"{anomaly.category}: {anomaly.summary}; restarting (attempt {used + 1} of at most {policy.max_attempts})"
        + why,
        generation=history.last_generation + 1, exclude_nodes=exclude, expires_at=now + ADVICE_TTL,
    )
