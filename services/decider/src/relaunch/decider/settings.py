from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class DeciderSettings(ServiceSettings):
    """RELAUNCH_DECIDER_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_DECIDER_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url", "database_url")
    """Postgres: the ledger and its outbox."""

    outbox_interval_s: float = 1.0
    """How often unpublished outbox rows are looked for (besides a kick after each commit)."""
    policy_file: str = ""
    """The operator's policy file (TOML, docs/policy.md); empty: the built-in policies.toml of this
    package. Read and validated once at start: an invalid file stops the decider, naming the key."""
    node_history_half_life_s: float = Field(172800.0, gt=0)
    """Half-life of a node's record of exclusions for other jobs (docs/policy.md "node history"):
    48 h by default, so two exclusions within about a day make a node suspect for every job, and a
    week-old record has all but vanished. An operator forgets a repaired node's record at once with
    `relaunch nodes clear NODE`."""
    hang_evidence_wait_s: float = Field(30.0, ge=0)
    """A hang the actuator reads the ranks of is decided once its evidence is in the ledger, or this long
    after its detection (docs/architecture.md, "Hang evidence"); the actuator's collection is bounded at
    20 s and it answers at once when it reads nothing. 0: hang evidence is not used (still recorded)."""
