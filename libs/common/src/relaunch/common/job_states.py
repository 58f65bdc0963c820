"""Slurm job states as JobObserved.state carries them (contract): the one list every service reads."""

from __future__ import annotations

FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"})
"""The attempt ended without success (a crash, the scheduler's doing, or the node's)."""
ENDED_UNFAILED = frozenset({"COMPLETED", "CANCELLED"})
"""The attempt ended by itself or by a cancel (a preempted one that Slurm shows CANCELLED reads as PREEMPTED
through as_read)."""
FINAL_STATES = FAILED_STATES | ENDED_UNFAILED
"""The attempt is over."""
ATTEMPT_ENDED = FINAL_STATES | {"REQUEUED"}
"""An attempt's state in the decider's ledger that says it ended (REQUEUED: the ledger's mark of an attempt Slurm
restarted; for the job itself REQUEUED is transient)."""
TRANSIENT_STATES = frozenset({"COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING", "REQUEUED"})
"""Slurm is between two states: look again shortly."""


def as_read(state: str, reason: str) -> str:
    """Slurm's state as relaunch reads it: a CANCELLED job whose reason names a preemption (a site's reclaim
    tool that cancels, an older or federated path) was preempted, the scheduler's doing (restarted as the
    policy's restart_on_preemption says), never a user's cancel (docs/policy.md). Slurm's own PREEMPTED
    state is the usual word for it."""
    if state == "CANCELLED" and "preempt" in reason.lower():
        return "PREEMPTED"
    return state
