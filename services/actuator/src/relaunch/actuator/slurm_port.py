"""The port both Slurm adapters fill (docs/architecture.md, "Layout"): what the actuator, its observer and the
watchdog ask of Slurm, whether the answer comes from Slurm's commands (adapters/slurm.py, `Slurm`) or from
slurmrestd (adapters/slurmrest.py, `SlurmRest`). Handlers are typed with it, never with an adapter;
tests/unit/test_slurm_port.py checks that both adapters keep every method with the same parameters."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from .domain.accounting import AccountedAttempt
from .domain.launches import BatchStep
from .domain.node_facts import NodeFacts
from .domain.observing import NodeCondition, Observed


class SlurmPort(Protocol):
    async def reachable(self) -> bool:
        """Whether slurmctld answers."""

    async def version(self) -> str:
        """Slurm's release ("24.11.5")."""

    async def list_jobs(self) -> dict:
        """Every job the controller knows, in squeue --json's shape."""

    async def show_job(self, job_id: str) -> dict | None:
        """One job in squeue --json's shape, or None when the controller no longer knows it."""

    async def observe(self, job_id: str) -> Observed:
        """What the reconciler reads of a job."""

    async def accounting(self, job_ids: list[str]) -> list[AccountedAttempt]:
        """The jobs' attempts in accounting."""

    async def batch_step(self, job_id: str, submitted: dt.datetime) -> BatchStep | None:
        """The batch step of the job's newest attempt (launch refusals, domain/refusals.py)."""

    async def accounting_since(self, start: dt.datetime) -> list[AccountedAttempt]:
        """Every attempt accounted since `start`."""

    async def node_facts(self) -> NodeFacts:
        """Nodes, their addresses, partitions and states."""

    async def node_conditions(self, nodes: list[str]) -> dict[str, NodeCondition]:
        """The nodes' state and reason."""

    async def drain(self, node: str, reason: str) -> None:
        """Drain (or mark down) one node, with the reason."""

    async def run_step(self, step: str, job_id: str, nodes: list[str] | None = None) -> None:
        """One step of an Advice's plan (domain/commands.py names them)."""

    async def run_command(self, argv: tuple[str, ...] | list[str]) -> None:
        """A Slurm command the domain built (scontrol update ...)."""
