"""Can Slurm start the successor, and may we let it start yet? Pure functions over Observed (time passed in).

Three Slurm rules the restart plan must respect (checked on 22.05.8, read in the source of 22.05,
24.11 and 26.05, where they are the same):

1. Required nodes beat exclusions. A job submitted with `-w node1,node2` has
   `ReqNodeList=node[1-2]`; `scontrol update ExcNodeList=node2` is accepted (rc 0), and the job then
   stays PENDING for good with `Reason=BadConstraints` ("Requested node configuration is not
   available", `Priority=0`). The same reason comes when the exclusions leave the partition too few
   nodes (`NumNodes=4-4` in a 4-node partition less one). A required node that is down or drained
   shows as `Reason=ReqNodeNotAvail,_UnavailableNodes:node3`.
2. Job credentials are revoked by the second. When an attempt ends, slurmctld's kill request
   carries `time(NULL)` (create_kill_job_msg), and each slurmd revokes the job's credentials issued
   at or before that second: slurmd's cred_revoked() refuses a credential whose `ctime <= revoked`
   (src/common/slurm_cred.c in 22.05, src/slurmd/slurmd/cred_context.c in 24.11 and 26.05). The
   successor's credential is made when slurmctld launches it, in whole seconds too, so a successor
   launched in the same second as its predecessor ended is killed at once: `Killing non-startable
   batch JobId=N: Job credential revoked` (slurmctld), `Job N already killed, do not launch batch
   job` (slurmd). Slurm's own requeue avoids it by delaying the successor (batch_requeue_fini:
   "The time stamp on the new batch launch credential must be larger than the time stamp on the
   revoke request", BeginTime = now + 121 s); `StartTime=now` undoes that delay, so we must keep
   the rule ourselves. batch_requeue_fini also sets the successor's SubmitTime to the requeue
   time, which is never earlier than the revocation (the kill is sent first), so "not before the
   second after SubmitTime" is always enough. It can be a second too cautious: an attempt that had
   already ended when it was requeued was revoked when it ended (its EndTime), and requeueing a
   finished job sends no new kill (seen on 22.05.8: failed at :18.938, requeued at :19.052,
   launched at :19.976, SubmitTime :19, and it ran). So when the caller remembers that EndTime,
   the second after it is used instead. `StartTime=now` is resolved by scontrol on this host, so the
   rule holds even when this host's clock and slurmctld's differ (the begin time sent is then
   itself at least that second).
3. What a refused launch looks like, reproduced on 22.05.8: the job's record says `JobState=FAILED
   Reason=NonZeroExitCode ExitCode=1:0 RunTime=00:00:00`, StartTime = EndTime = SubmitTime (one
   second): slurmctld ends it with job_complete(..., 256) (agent.c, _wif_status()), which is why the
   exit code looks like the script's own `exit 1`. A script that fails at once on its own looks the
   same in all of those (seen on 22.05.8: `StartTime=now` let the successor start in the second of its
   requeue when its predecessor had ended before it, and it printed its error and exited 1 in that
   second). What only a refusal leaves is its batch step: slurmctld built it and closed it itself,
   `CANCELLED` with no exit code, where a script that ran leaves `FAILED 1:0` (launches.py). So the
   job's record only makes a refusal possible (possibly_refused: cheap, read every pass); Slurm's
   accounting of the batch step decides (launch_refused), and without it nothing is refused.
"""

from __future__ import annotations

import datetime as dt

from .hostlists import expand
from .launches import BatchStep
from .observing import Observed

NEVER_STARTS = frozenset({
    "BadConstraints",       # no node set satisfies the request (required nodes excluded, too few nodes left)
    "PartitionNodeLimit",   # more or fewer nodes than the partition allows
    "PartitionConfig",      # the request does not fit the partition's configuration
    "PartitionTimeLimit",
    "InvalidAccount", "InvalidQOS",
})
"""Reasons of a pending job that Slurm will not start without someone changing the job or the cluster."""

LAUNCH_SETTLE = dt.timedelta(seconds=1)
"""A successor RUNNING in a later second than it started has passed the credential check (a refused
launch is killed within milliseconds of its allocation)."""


def second_after(at: dt.datetime) -> dt.datetime:
    """The start of the wall-clock second after `at` (Slurm's times are whole seconds)."""
    return at.replace(microsecond=0) + dt.timedelta(seconds=1)


def earliest_launch(observed: Observed, ended_before_requeue: dt.datetime | None = None) -> dt.datetime | None:
    """Rule 2: the successor may be let start (StartTime=now) from this moment on; None when unknown
    (no SubmitTime: nothing to wait for). `ended_before_requeue`: the EndTime of the attempt that was
    requeued, when it had ended before the requeue (then its credentials were revoked at that second)."""
    bounds = [t for t in (observed.submitted, ended_before_requeue) if t is not None]
    return second_after(min(bounds)) if bounds else None


def required_conflicts(observed: Observed, exclude: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Rule 1: the nodes of `exclude` that the job requires (sbatch -w / ReqNodeList)."""
    return tuple(sorted(set(exclude) & set(observed.required)))


def unavailable_nodes(reason: str) -> tuple[str, ...]:
    """`ReqNodeNotAvail,_UnavailableNodes:node[2-3]` -> the node names it gives (a hostlist)."""
    _, sep, names = reason.partition("UnavailableNodes:")
    if not sep or not names.strip():
        return ()
    try:
        return tuple(expand(names.strip().rstrip(")")))
    except ValueError:
        return ()


def never_starts(observed: Observed, exclude: tuple[str, ...] | list[str] = ()) -> str:
    """Why Slurm will never start this pending job as it stands, or '' when it may. `exclude`: the
    nodes the Advice blames, required ones included: a required node that is unavailable and that
    relaunch blames (drained by it, say) is not coming back by itself, whereas any other unavailable
    required node (down for a reboot) is waited for like any resource."""
    if observed.state != "PENDING":
        return ""
    reason = observed.reason
    head = reason.split(",", 1)[0]
    if head in NEVER_STARTS:
        why = ""
        if conflict := required_conflicts(observed, observed.excluded):
            why = f"; it requires {','.join(conflict)} (ReqNodeList) and excludes it too (ExcNodeList)"
        elif observed.excluded and observed.num_nodes:
            why = f"; it asks for {observed.num_nodes} node(s) without {','.join(observed.excluded)}"
        return f"Slurm will not start it: Reason={reason}{why}"
    if head == "ReqNodeNotAvail":
        blocked = sorted(set(unavailable_nodes(reason)) & (set(exclude) | set(observed.excluded)))
        if blocked:
            return (f"Slurm will not start it: Reason={reason}; it requires {','.join(blocked)}, which "
                    "relaunch leaves out")
    return ""


def possibly_refused(observed: Observed) -> bool:
    """Rule 3, the job's record: a restarted job (Restarts > 0) that ended FAILED with ExitCode 1:0 in the
    very second it started, no later than the second it was requeued in (SubmitTime), as a successor
    Slurm killed at launch does. Not proof: a script that fails at once looks the same."""
    if observed.restarts < 1 or observed.state != "FAILED" or observed.exit_code != "1:0":
        return False
    start, end, submit = observed.started, observed.ended, observed.submitted
    if start is None or end is None or submit is None:
        return False
    return start.replace(microsecond=0) == end.replace(microsecond=0) and start.replace(microsecond=0) <= submit


def launch_refused(observed: Observed, batch: BatchStep | None) -> bool:
    """Rule 3: this attempt is a successor that Slurm killed at launch, before its batch script ran.
    Only from Slurm's own evidence: the job's record allows it (possibly_refused) and the attempt's batch
    step, as Slurm's accounting closed it, was never run by a slurmstepd (launches.py). Without that
    record (`batch` None: accounting off, slow or unreachable) the attempt counts as one that ran."""
    return possibly_refused(observed) and batch is not None and batch.never_ran


def launched(observed: Observed, now: dt.datetime) -> bool:
    """The successor is past its launch: running in a later second than it started, or over (the
    caller tells a refused launch apart first)."""
    if observed.state == "RUNNING":
        return observed.started is None or now >= observed.started.replace(microsecond=0) + LAUNCH_SETTLE
    return observed.state not in ("PENDING", "")
