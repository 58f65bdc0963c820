"""What the dashboard draws: one job's progress with its events on one time axis, and the fleet."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request

from relaunch.common.clock import utcnow

from ..adapters.progress_read import ProgressUnavailable
from ..auth import evidence_withheld
from ..domain import evidence
from ..domain.charts import progress_chart

router = APIRouter(prefix="/v1", tags=["pictures"])


@router.get("/jobs/{cluster}/{job_id}/progress",
            summary="A job's progress per attempt (bounded resolution) with anomalies, Advice, reconcile steps "
                    "and restarts on the same time axis")
async def progress(request: Request, cluster: str, job_id: str) -> dict:
    backends = request.app.state.backends
    detail = await backends.ledger.job(cluster, job_id)
    if detail is None:
        raise HTTPException(404, detail=f"job {job_id} on cluster {cluster} is not in the ledger")
    buckets, width, note = [], 0, ""
    if backends.progress is None:
        note = "no progress history: the API has no Redis (RELAUNCH_REDIS_URL)"
    else:
        try:
            buckets, width = await backends.progress.series(cluster, job_id)
        except ProgressUnavailable as exc:
            note = str(exc)
    # Markers quote anomalies' log lines: only with the token, where one is configured.
    chart = progress_chart(evidence.withhold_lines(detail, evidence_withheld(request)), buckets, width)
    return {"cluster": cluster, "job_id": job_id, **chart, "note": note}


@router.get("/fleet", summary="Failures per day by fault class and action, restarts, stops, time lost and MTTR, "
                              "nodes most often implicated, relaunch's own health")
async def fleet_view(request: Request, cluster: str | None = None,
                     days: Annotated[int, Query(ge=1, le=90, description="Days back, today included.")] = 14) -> dict:
    backends = request.app.state.backends
    out = await backends.ledger.fleet(utcnow(), days, cluster)
    try:
        out["health"] = await backends.events.health()
    except Exception as exc:  # noqa: BLE001 - NATS down: the ledger's part still answers
        out["health"] = {"error": f"NATS is not reachable, so consumer lag, DLQ size and leader are unknown: {exc}"}
    return out
