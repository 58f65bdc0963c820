from __future__ import annotations

from typing import ClassVar, Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class ActuatorSettings(ServiceSettings):
    """RELAUNCH_ACTUATOR_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_ACTUATOR_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url", "redis_url")
    """Redis: the cluster-wide action rate limit."""

    poll_interval_s: float = 1.0
    """How often the observer runs `squeue --json`."""
    slurm_timeout_s: float = 8.0
    """Timeout of one Slurm command; past it the step is retried later."""
    mode: Literal["act", "observe"] = "act"
    """act: run Slurm commands; observe: record what would be run and touch nothing."""
    partitions: list[str] = []
    """Partition allowlist as a JSON list; empty: every partition. Advice for a job elsewhere is
    abandoned with reason "partition not allowed"."""
    actions_per_minute: float = 60.0
    """Cluster-wide rate of disruptive actions (requeue, cancel), shared by every actuator (Redis)."""
    actions_burst: int = 20
    """How many disruptive actions may happen at once before the rate applies."""
    lease_ttl_s: float = 6.0
    """The leader lease's lifetime; a standby takes over within lease_ttl_s + lease_renew_s."""
    lease_renew_s: float = 2.0
    """How often the leader renews its lease and a standby tries to take it."""
    slurm_lost_s: float = 15.0
    """A leader that cannot reach slurmctld (`scontrol ping`) for this long steps down, and leaves the
    lease to a standby for `step_down_s`: one that can reach Slurm carries on (docs/reliability.md)."""
    step_down_s: float = 60.0
    instance: str = ""
    """This actuator's name in the lease (default: host name and process id)."""
    drain_nodes: bool = False
    """Drain a node (`scontrol update NodeName=X State=DRAIN Reason="relaunch: ..."`) when an Advice
    excludes it with confirmed hardware evidence (a gpu-probe "failed" verdict, or a hardware-domain
    log signature naming it). Off: nodes are only excluded from the job. Observe mode only audits it."""
    down_lost_nodes: bool = True
    """Mark a lost node DOWN (`scontrol update NodeName=X State=DOWN Reason="relaunch: ..."`) when an
    Advice excludes it because the detector found it lost (its gpu-probe silent while the job stopped)
    and the job still holds it: otherwise Slurm keeps the job COMPLETING, away from its restart, until
    SlurmdTimeout. At most two nodes per Advice (docs/operator-guide.md). Observe mode only audits it."""
    hang_evidence: bool = True
    """On a hang anomaly of a running opted-in job (act mode only), read its ranks from inside its
    allocation (`srun --overlap` on each node: py-spy and /proc) and publish HangEvidence: who stopped
    the collective, and whether the node or the user's code (docs/architecture.md, "Hang evidence")."""
    hang_evidence_timeout_s: float = 20.0
    """The whole collection's bound, every node at once; past it a node gives no evidence."""
    hang_evidence_python: str = "python3"
    """The Python the collector runs under on the job's nodes (standard library only)."""
    pyspy: str = ""
    """py-spy on the job's nodes; empty: the py-spy installed beside the actuator's own Python (the same
    path on the nodes: a shared install), else `py-spy` on the nodes' PATH."""
    history_window_s: float = 900.0
    """On start-up (and on taking over the lease) the observer reads job accounting (sacct) this far
    back for opted-in jobs that ended, and were forgotten by slurmctld, while no observer was looking."""


class SlurmRestSettings(BaseSettings):
    """RELAUNCH_SLURMRESTD_* environment variables: slurmrestd, when RELAUNCH_SLURM_API=rest (actuator
    and watchdog alike; docs/install-kubernetes.md)."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_SLURMRESTD_", extra="forbid", frozen=True)

    url: str = ""
    """slurmrestd's base URL, e.g. http://slurm-restapi.slurm:6820 (Slinky) or http://localhost:14820 (the local stack)."""
    token_file: str = ""
    """File holding the JWT (`scontrol token` output, or the token alone; a mounted Secret). Read again
    when it changes. A file, never the token itself: environments and command lines are visible."""
    user_name: str = ""
    """Sent as X-SLURM-USER-NAME; empty: the user the token was minted for (its `sun` claim)."""
    ca_file: str = ""
    """CA bundle (PEM) that signed slurmrestd's certificate (https URLs); empty: the system's store."""
    tls_verify: bool = True
    """Verify slurmrestd's certificate (https URLs). Off only for a test cluster."""
    timeout_s: float = 8.0
    """Timeout of one request; past it the step is retried later."""
    cli_fallback: bool = False
    """Steps slurmrestd does not offer (requeue before Slurm 26.05) run Slurm's command instead, which
    needs the clients and munge on this host; off: such a step is refused and the Advice abandoned."""
