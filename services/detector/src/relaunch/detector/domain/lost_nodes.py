"""lost(job_nodes, heard, progress, now) -> a lost node of a running job, a silent probe, or nothing. Pure.

A node that loses power or its network mid-job is found by Slurm only after SlurmdTimeout (300 s by
default) and by NCCL's watchdog after minutes. gpu-probe publishes a NodeHealth every interval (its
heartbeat, NodeHealth.interval_s): their silence, together with the job's own progress, says within
seconds that a host is gone (docs/reliability.md, "Faults between hosts"). Rules:
- a node is silent when nothing came from its probe for more than MISSED heartbeat intervals (at
  least MIN_SILENCE_S); a node never heard from (no probe there) is never silent: nothing is known;
- a silent node of a job is LOST only when the job's progress stopped too: no training step since
  the node's next heartbeat was due (allowing STALLED_STEPS of the job's own step intervals and
  SLACK_S for steps in flight), and none for at least STALLED_STEPS step intervals (a job that keeps
  stepping has all its hosts: its probe alone is down, which is reported, never acted on);
- a job without any progress seen is never judged on silence alone (the probe may be down): reported;
- nor one saving a checkpoint (its steps stop for the save): the hang watch, which knows how long
  saves take, judges it;
- the lost nodes are named only when some of the job's nodes are still heard after the silent ones
  went (a heartbeat published since their due time and half an interval more, for a loaded probe's late
  heartbeat: a node merely not yet overdue proves nothing, and the verdict waits for it); when every node of the job is silent at once (a whole-rack cut, or the bus itself unreachable from the hosts), the verdict
  names none, so that the restart excludes nothing and the job waits in the queue instead of being
  sent away from the partition (docs/policy.md).
- when the hang watch declares a hang (`at_hang`), a node that fell silent shortly before the job's last
  step (within MISSED + 1 of its heartbeat intervals and OUTPUT_LAG_S) while another node of the job was heard
  after that step is the lost host: the step proved the host alive a moment longer than its heartbeat did
  (a heartbeat that died with the cut in flight, a line that reached the log seconds late through a loaded
  host's slurmstepd and srun), and the verdict above took it for a probe alone. A probe silent for longer
  before the last step is a probe alone, hang or not.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Literal

from relaunch.common.schemas import AnomalyDetected, EvidenceLine

from .detection import anomaly_id

MISSED = 2
"""Heartbeat intervals without a NodeHealth before a node counts as silent (the job's stopped progress
must confirm it, so one late heartbeat costs nothing)."""
MIN_SILENCE_S = 3.0
"""Never less silence than this, whatever the interval (a short GC pause or a slow publish)."""
STALLED_STEPS = 2.0
"""The job's progress must be overdue by this many of its own (median) step intervals."""
JITTER_S = 0.3
"""How early or late a heartbeat may come (a probe publishes every interval, give or take its sampling)."""
LATE_SHARE = 0.5
"""How late, in heartbeat intervals, a probe's heartbeat may come on a loaded host (seen: 0.3 s and more
with three test stacks on two cores): a node heard within that of a silent node's due time proves nothing."""
SLACK_S = 1.0
"""Steps that were in flight when the host went: seen up to this long after its heartbeat was due."""
OUTPUT_LAG_S = 10.0
"""How much later than it was printed a job's line may reach its log file on a loaded host (a task's output goes
through slurmstepd and srun, CPU-starved there like the job). Seen in the hosts tier with three test stacks on
two cores: a cut host's last step landed 2.4 to 7.6 s after its last heartbeat (the follower stamps a line with
the file's mtime, so this is the output path's lag, not the follower's). Only a hang (at_hang) allows it: the
live verdict, which acts within seconds, keeps SLACK_S."""


@dataclass(frozen=True)
class Heard:
    at: float
    """When the node's last NodeHealth was published (epoch seconds)."""
    interval_s: float
    """The probe's heartbeat period, as the probe said."""


@dataclass(frozen=True)
class Progress:
    at: float | None
    """The attempt's last training step (epoch seconds); None: no step seen yet."""
    step: int | None = None
    intervals: tuple[float, ...] = ()
    """Recent step intervals (seconds)."""
    saving: bool = False
    """A checkpoint save is in progress (its start line seen, not its end)."""


@dataclass(frozen=True)
class Verdict:
    kind: Literal["lost", "probe_silent"]
    nodes: tuple[str, ...]
    """lost: the nodes to blame (empty: all of the job's nodes went silent at once); probe_silent: the
    silent nodes whose job keeps going (or whose job shows no progress to judge by)."""
    silent: tuple[str, ...]
    reason: str


def silence(heard: Heard, now: float) -> float:
    """Seconds since the node's last heartbeat (0 while it is not yet overdue)."""
    quiet = now - heard.at
    return quiet if quiet > max(MISSED * heard.interval_s, MIN_SILENCE_S) else 0.0


def verdict(job_nodes: list[str], heard: dict[str, Heard], progress: Progress, now: float) -> Verdict | None:
    """The finding about one running attempt on `job_nodes`, or None when none of them is silent."""
    quiet = {n: silence(heard[n], now) for n in job_nodes if n in heard}
    silent = tuple(sorted(n for n, s in quiet.items() if s > 0))
    if not silent:
        return None
    # The latest moment the host can have gone: when the heartbeat of the most recently heard silent
    # node was due.
    gone_by = max(heard[n].at + heard[n].interval_s for n in silent)
    described = "; ".join(f"{n}: no gpu-probe heartbeat for {quiet[n]:.1f} s (one every "
                          f"{heard[n].interval_s:g} s)" for n in silent)
    if progress.at is None:
        return Verdict("probe_silent", silent, silent,
                       f"{described}; the job reports no training progress, so a lost host cannot be told from "
                       "a stopped probe: reported, not acted on")
    if progress.saving:
        return Verdict("probe_silent", silent, silent,
                       f"{described}; the job is saving a checkpoint, so its steps stop anyway: left to the hang "
                       "watch (reported, not acted on)")
    stalled = now - progress.at
    step_s = statistics.median(progress.intervals) if progress.intervals else 0.0
    at_step = f" (step {progress.step})" if progress.step is not None else ""
    if progress.at > gone_by + STALLED_STEPS * step_s + SLACK_S or stalled < STALLED_STEPS * step_s:
        return Verdict("probe_silent", silent, silent,
                       f"{described}; the job's last step{at_step} was {stalled:.1f} s ago, so its hosts are "
                       "working: the probe alone is silent (reported, not acted on)")
    # Alive: heard since the silent nodes went. A node neither silent nor heard since then may be gone
    # with them (a rack cut reaches every node at once, but their silences pass the threshold up to an
    # interval apart): wait for it to speak or to fall silent too.
    # A heartbeat proves its node outlived the silent ones only when it came after the latest moment they
    # can have gone: their next heartbeat's due time, plus how late a heartbeat may come on a busy host
    # (LATE_SHARE of an interval). One that came a little before or after that due time (the probes'
    # phases differ, and a loaded probe publishes late) may have been sent before a cut that took every
    # node at once.
    outlived = max(heard[n].at + heard[n].interval_s * (1 + LATE_SHARE) for n in silent) + JITTER_S
    alive = [n for n in job_nodes if n in quiet and quiet[n] == 0 and heard[n].at > outlived]
    if any(n in quiet and quiet[n] == 0 and n not in alive for n in job_nodes):
        return None
    pace = f", about {step_s:.2g} s per step before" if step_s else ""
    if not alive:
        return Verdict("lost", (), silent,
                       f"every node of the job went silent at once ({described}) and no training step came for "
                       f"{stalled:.1f} s{at_step}{pace}: the hosts or their network are gone; no node is blamed "
                       "alone, the job waits for nodes rather than leaving them all out")
    return Verdict("lost", silent, silent,
                   f"lost host: {described}, while {', '.join(alive)} still report; no training step for "
                   f"{stalled:.1f} s{at_step}{pace}")


def at_hang(job_nodes: list[str], heard: dict[str, Heard], progress: Progress, now: float) -> Verdict | None:
    """The lost host behind a hang the progress watch declared, or None (see the module's last rule)."""
    if progress.at is None:
        return None
    quiet = {n: silence(heard[n], now) for n in job_nodes if n in heard}
    silent = tuple(sorted(n for n, s in quiet.items() if s > 0
                          and heard[n].at >= progress.at - (MISSED + 1) * heard[n].interval_s - OUTPUT_LAG_S))
    if not silent:
        return None
    since = max(progress.at, max(heard[n].at + heard[n].interval_s * (1 + LATE_SHARE) for n in silent) + JITTER_S)
    alive = [n for n in job_nodes if n in quiet and quiet[n] == 0 and heard[n].at > since]
    if not alive:
        return None  # nothing proves the other hosts outlived it: the hang stands as it is
    described = "; ".join(f"{n}: no gpu-probe heartbeat for {quiet[n]:.1f} s (one every {heard[n].interval_s:g} s)"
                          for n in silent)
    return Verdict("lost", silent, silent,
                   f"lost host: {described}, silent since just before the job's last step "
                   f"({now - progress.at:.1f} s ago), while {', '.join(alive)} still report")


def anomaly(cluster: str, job_id: str, attempt: int, found: Verdict, heard: dict[str, Heard], now: dt.datetime,
            last_step: int | None, reason: str | None = None) -> AnomalyDetected:
    """The node_lost anomaly of a lost verdict: a hang of the attempt, restarted without the lost nodes (none: a
    plain restart), its evidence each silent node's last heartbeat."""
    evidence = [EvidenceLine(path=f"gpu-probe:{n}", offset=0,
                             text=f"last NodeHealth from {n} at "
                                  f"{dt.datetime.fromtimestamp(heard[n].at, dt.UTC):%H:%M:%S.%f}"[:-3] + " UTC")
                for n in found.silent]
    return AnomalyDetected(
        anomaly_id=anomaly_id(cluster, job_id, attempt, "node_lost"), cluster=cluster, job_id=job_id,
        attempt=attempt, kind="hang", source="node", signature_id="node_lost", category="node_lost",
        fault_domain="infrastructure", action="restart_excluding" if found.nodes else "restart",
        summary=(reason or found.reason)[:2000], nodes=list(found.nodes), evidence=evidence, detected_at=now,
        last_step=last_step)
