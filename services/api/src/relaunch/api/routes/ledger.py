"""Read-only views of the ledger: jobs, one job's history, advice, nodes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request

from relaunch.common.outcome_words import outcome

from ..auth import evidence_withheld
from ..domain import evidence

router = APIRouter(prefix="/v1", tags=["ledger"])


def with_outcome(job: dict, anomalies: list, withheld: str) -> dict:
    """`job` with `outcome`: the sentence `relaunch jobs` prints and the job page leads with
    (relaunch.common.outcome_words). Withheld evidence lends it no word (category words only)."""
    if withheld:
        anomalies = [{**a, "evidence": []} for a in anomalies]
    # Slurm's "None" (no reason), as ledgers written before the actuator dropped it still hold it.
    reason = "" if job.get("reason") == "None" else job.get("reason")
    return {**job, **({"reason": reason} if "reason" in job else {}), "outcome": outcome(job, anomalies)}

Limit = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip (page start).")]


@router.get("/jobs", summary="Jobs relaunch tracks, newest activity first")
async def jobs(request: Request, cluster: str | None = None,
               state: Annotated[list[str] | None, Query(description="Slurm state, e.g. RUNNING (any case); repeatable.")] = None,
               verdict: Annotated[list[str] | None, Query(
                   description="watching | recovering | stopped | observing; repeatable.")] = None,
               limit: Limit = 50, offset: Offset = 0) -> dict:
    # Slurm's states are upper case and verdicts lower case: `?state=running` means RUNNING.
    items, total = await request.app.state.backends.ledger.jobs(
        cluster=cluster, states=[s.upper() for s in state] if state else None,
        verdicts=[v.lower() for v in verdict] if verdict else None, limit=limit, offset=offset)
    withheld = evidence_withheld(request)
    return {"jobs": [with_outcome(item, item.pop("failures", None) or [], withheld) for item in items],
            "total": total, "limit": limit, "offset": offset}


@router.get("/jobs/{cluster}/{job_id}", summary="One job: attempts, anomalies, advice with evidence and "
                                                 "reconcile steps, audit, operator overrides")
async def job(request: Request, cluster: str, job_id: str) -> dict:
    found = await request.app.state.backends.ledger.job(cluster, job_id)
    if found is None:
        raise HTTPException(404, detail=f"job {job_id} on cluster {cluster} is not in the ledger "
                                        "(is its comment opted in with 'relaunch'? is the cluster name right?)")
    # The log lines quoted as evidence only with the token, where one is configured (auth.evidence_withheld).
    shown = evidence.withhold_lines(found, evidence_withheld(request))
    return {**shown, "job": with_outcome(shown["job"], shown.get("anomalies") or [], "")}


@router.get("/advice", summary="Advice, newest first; active=true: what the actuator may still act on")
async def advice(request: Request, active: Annotated[bool | None, Query(
                     description="true: PENDING and not expired; false: the others; absent: all.")] = None,
                 cluster: str | None = None, limit: Limit = 50, offset: Offset = 0) -> dict:
    items, total = await request.app.state.backends.ledger.advice(
        cluster=cluster, active=active, limit=limit, offset=offset)
    return {"advice": evidence.withhold_in_advice(items, evidence_withheld(request)), "total": total,
            "limit": limit, "offset": offset}


@router.get("/nodes", summary="Nodes across jobs: latest health, non-healthy history, exclusions by advice")
async def nodes(request: Request, cluster: str | None = None,
                history: Annotated[int, Query(ge=0, le=500, description="Newest non-healthy readings kept per "
                                                                      "node.")] = 20) -> dict:
    items = await request.app.state.backends.ledger.nodes(cluster=cluster, history=history)
    return {"nodes": items}
