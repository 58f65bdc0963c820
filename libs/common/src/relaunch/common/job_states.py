"""Slurm job states as JobObserved.state carries them (contract): the one list every service reads."""

from __future__ import annotations

FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"})
"""The attempt ended without success (a crash, the scheduler's doing, or the node's)."""
FINAL_STATES = FAILED_STATES | {"COMPLETED", "CANCELLED"}
"""The attempt is over."""
TRANSIENT_STATES = frozenset({"COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING", "REQUEUED"})
"""Slurm is between two states: look again shortly."""
