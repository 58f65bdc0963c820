"""classify(readings, expected_gpus) -> verdict and reasons. Pure.

The full XID table comes with issue 6; here: a missing GPU or an uncorrectable ECC error fails
the node, anything else is healthy.
"""

from __future__ import annotations

from typing import Literal

from relaunch.common.schemas import GpuReading

Verdict = Literal["healthy", "degraded", "failed"]


def classify(readings: list[GpuReading], expected_gpus: int) -> tuple[Verdict, list[str]]:
    reasons = []
    if len(readings) < expected_gpus:
        reasons.append(f"{expected_gpus - len(readings)} of {expected_gpus} GPUs missing (fell off the bus?)")
    reasons += [f"GPU {g.index}: {g.ecc_uncorrected} uncorrectable ECC errors" for g in readings if g.ecc_uncorrected]
    return ("failed" if reasons else "healthy"), reasons
