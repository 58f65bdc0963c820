"""What an operator's policy allows a job, and what a job's effective policy is (resolve() makes one):
the values the decider's decide() applies and `relaunch policy check` shows. Frozen values, no I/O.
The defaults are the built-in `default` policy's (policies.toml restates them; a test keeps the two
equal); docs/policy.md describes every field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

FAULT_CLASSES = ("hardware", "infrastructure", "application", "resource", "scheduler", "unknown", "hang", "straggler")
"""Failure classes that have their own restart budget: the fault domains, then hangs and stragglers."""
IB_PAIRS = ("both", "one")
DIVERGENCE = ("stop", "report", "restart")
"""How an InfiniBand completion error's two hosts are suspected (Policy.ib_pair)."""


@dataclass(frozen=True)
class Budgets:
    """Restarts relaunch may advise per failure class over a job's life. The defaults are the
    built-in `default` policy's (policies.toml restates them; a test keeps the two equal)."""

    hardware: int = 5
    infrastructure: int = 5
    application: int = 0
    """Application faults (the job's own code or data) fail the same way again: stop by default."""
    resource: int = 0
    """Out of host memory, disk, shared memory: the same job asks for the same again."""
    scheduler: int = 10
    """Time limits and preemptions: routine for long runs that checkpoint."""
    unknown: int = 2
    hang: int = 2
    straggler: int = 1

    def of(self, klass: str) -> int:
        return getattr(self, klass) if klass in FAULT_CLASSES else self.unknown


@dataclass(frozen=True)
class Policy:
    """One operator policy, or (after resolve()) the effective policy of one job."""

    max_attempts: int = 3
    """Attempts in all, the first included, for a job whose comment does not say."""
    max_attempts_cap: int = 100
    """The most a job may ask for with max_attempts=N (100: every version-1 comment stays valid)."""
    straggler: bool = False
    """Restart on a straggler (opt-in per job); otherwise a straggler is only reported."""
    observe_only: bool = False
    option_errors: tuple[str, ...] = ()
    max_exclude: int = 2
    """At most this many nodes are left out of one restart (a cap on the blast radius of one attribution)."""
    name: str = "default"
    budgets: Budgets = Budgets()
    storm_restarts: int = 3
    """K: this many restarts within storm_window_s without progress stop the job (0: no storm rule)."""
    storm_window_s: int = 3600
    stop_without_progress: bool = True
    failures_without_checkpoint: int = 2
    """N: a job stops when its last N failed attempts saved no checkpoint (rule no_checkpoint, docs/policy.md);
    armed only once relaunch has seen the job save one (0: no such rule)."""
    restart_on_time_limit: bool = True
    restart_on_preemption: bool = True
    straggler_allowed: bool = True
    """Whether a job may turn straggler recovery on (straggler=on); the operator's "off" forbids it."""
    hang_timeout: int = 0
    """The job's hang_timeout=S: seconds without progress before a hang, at least (0: calibrated by the detector)."""
    hang_timeout_cap: int = 0
    """The longest hang_timeout a job may ask for (0: no cap): how long a hung job may hold its GPUs."""
    terminate_hung: bool = True
    """A hung job (still RUNNING, holding its nodes) that a rule stops is cancelled with a terminate
    Advice; false: it is left to run into its time limit."""
    divergence: str = "stop"
    """A diverged run (docs/policy.md, "Divergence"): "stop" cancels it, "report" only reports it,
    "restart" restarts it (its restarts count as the unknown class). The job's divergence= option."""
    ib_pair: str = "both"
    """An InfiniBand completion error names two hosts: "both" suspects both ends, "one" the end with
    other evidence (else the peer, the far end)."""

    def __post_init__(self) -> None:
        if self.divergence not in DIVERGENCE:
            raise ValueError(f"divergence must be one of {', '.join(DIVERGENCE)}, not {self.divergence!r}")
        if self.ib_pair not in IB_PAIRS:
            raise ValueError(f"ib_pair must be one of {', '.join(IB_PAIRS)}, not {self.ib_pair!r}")

    def as_dict(self) -> dict[str, int | str | bool]:
        """Flat, as Advice.policy and the ledger carry it."""
        out: dict[str, int | str | bool] = {
            "policy": self.name, "max_attempts": self.max_attempts, "straggler": self.straggler,
            "observe_only": self.observe_only, "max_exclude": self.max_exclude,
            "storm_restarts": self.storm_restarts, "storm_window_s": self.storm_window_s,
            "stop_without_progress": self.stop_without_progress,
            "failures_without_checkpoint": self.failures_without_checkpoint,
            "restart_on_time_limit": self.restart_on_time_limit,
            "restart_on_preemption": self.restart_on_preemption, "hang_timeout": self.hang_timeout,
            "ib_pair": self.ib_pair, "terminate_hung": self.terminate_hung, "divergence": self.divergence,
        }
        out.update({f"budget_{f.name}": getattr(self.budgets, f.name) for f in fields(self.budgets)})
        return out
