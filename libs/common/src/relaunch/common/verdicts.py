"""The words a verdict is made of: a fault's domain and the action it calls for. Plain `Literal`s
with no dependency, so that what reads only them (the signature catalogue, `relaunch classify`, whose
start-up is benchmarked) need not import pydantic; relaunch.common.schemas re-exports them."""

from __future__ import annotations

from typing import Literal

FaultDomain = Literal["hardware", "infrastructure", "application", "resource", "scheduler", "unknown"]
Action = Literal["restart", "restart_excluding", "stop"]
