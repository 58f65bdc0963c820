from __future__ import annotations

from typing import ClassVar, Literal

from pydantic_settings import SettingsConfigDict

from relaunch.common.settings import ServiceSettings


class DetectorSettings(ServiceSettings):
    """RELAUNCH_DETECTOR_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_DETECTOR_", extra="forbid", frozen=True)
    backends: ClassVar[tuple[str, ...]] = ("nats_url", "redis_url")
    """Redis: hot state (progress, baselines, deadlines)."""

    follow_interval_s: float = 0.1
    """How often followed log files are read for new lines (one stat per file; at 0.1 s the failure
    line -> Advice p95 is ~0.15 s on the mini-cluster, at 0.25 s it was 0.33 s)."""
    quiet_follow_interval_s: float = 1.0
    """How often a followed file that has not grown for 10 s is looked at (one written to recently is
    looked at every follow_interval_s): 10,000 silent files then cost a tenth of the stat() calls."""
    cold_follow_interval_s: float = 5.0
    """How often a followed file that has not grown for 60 s is looked at (a silent job: on a shared
    filesystem each look is a metadata request to its server). A crash ends the job, and Slurm's FAILED
    makes the detector read the log's last lines whatever this says."""
    failure_grace_s: float = 2.0
    """After Slurm reports a failed attempt, how long to wait for log lines that explain it
    before falling back to the scheduler's state."""
    extra_signatures: list[str] = []
    """Operator signature files (TOML, same shape as the built-in catalogue), as a JSON list."""
    log_roots: str = ""
    """Directories (':'-separated, absolute) under which a job's output may be read, besides the job's own
    working directory; default none. A job's output is read only where the job's user could read it and it
    lies under one of these or the job's working directory (docs/security.md): e.g. the cluster's shared
    log directory, `/scratch/logs:/shared/slurm-out`."""
    progress_keys: Literal["required", "off"] = "required"
    """Whether a progress report must carry a key that its job's own log printed (relaunch.client does
    both; docs/security.md). "off" lets anyone holding the shared `cli` NATS user report progress for any
    job, and so stop it with NaN losses: only for a cluster whose jobs all belong to one user, or a bench."""
    batch_bytes: int = 256 * 1024
    """Largest log batch published at once (NATS' default max payload is 1 MiB)."""
    hang_floor_s: float = 600.0
    """No hang is declared before this many seconds without progress, however fast the steps (a job may
    set its own with hang_timeout=N in its comment). 10 minutes, as NCCL's watchdog and AWS HyperPod's
    example rule (no step line for 10 minutes) wait: training pauses for evaluation, checkpoints and data
    reloads, and a pause that no line announces must fit under the floor the first time it happens (the
    detector learns it then: docs/user-guide.md, "Hangs"). The local and test stacks set 10 s."""
    hang_warmup_s: float = 1800.0
    """Allowance before the first step of an attempt (start-up, data loading, checkpoint loading)."""
    hang_sweep_s: float = 1.0
    """How often hang deadlines are swept."""
    straggler_fraction: float = 0.2
    """Throughput this far below the job's own baseline, sustained, makes a straggler."""
    state_cache_jobs: int = 20_000
    """Jobs whose progress state this replica keeps in memory (as stored, about 2 KB each at full size),
    so that a report does not read the state from Redis again; 0 turns the cache off."""
    malloc_mmap_threshold: int = 128 * 1024
    """glibc's mmap threshold in bytes, fixed at start-up (adapters/allocator.py): blocks this large are
    mapped apart and given back when freed, so that short-lived large blocks do not keep heap pages in
    the detector's memory. 0 leaves glibc's dynamic threshold; glibc's own MALLOC_MMAP_THRESHOLD_ wins."""

    def log_root_list(self) -> tuple[str, ...]:
        """log_roots as absolute paths (a relative entry is an error, said at start-up)."""
        roots = tuple(r for r in self.log_roots.split(":") if r)
        bad = [r for r in roots if not r.startswith("/")]
        if bad:
            raise ValueError(f"RELAUNCH_DETECTOR_LOG_ROOTS: {', '.join(bad)} is not an absolute path")
        return roots
