"""Endpoints that change state; every one requires the bearer token (relaunch.api.auth)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from relaunch.common import subjects
from relaunch.common.schemas import AuditEntry, JobId, Name

from ..auth import require_token
from ..metrics import CLEARANCES, OVERRIDES

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["operator"], dependencies=[Depends(require_token)])


class ModeChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["observe", "act"] = Field(description="observe: plan and record, never touch Slurm; act: act.")
    reason: str = Field("", max_length=1000, description="Why, for the audit trail.")
    actor: str = Field("", max_length=200, description="Who asks (the token is shared, so say it here).")


@router.post("/jobs/{cluster}/{job_id}/mode", status_code=201,
             summary="Record an operator override of a job's mode (observe | act)",
             responses={401: {"description": "missing or wrong bearer token"},
                        404: {"description": "no such job in the ledger"},
                        503: {"description": "no token configured, or the ledger is down"}})
async def set_mode(request: Request, cluster: Name, job_id: JobId, change: ModeChange) -> JSONResponse:
    backends = request.app.state.backends
    override = await backends.overrides.record(cluster, job_id, change.mode, change.reason, change.actor)
    if override is None:
        raise HTTPException(404, detail=f"job {job_id} on cluster {cluster} is not in the ledger: an override "
                                        "can only be set on a job relaunch has seen")
    OVERRIDES.labels(change.mode).inc()
    # The ledger row is the record; the audit entry tells live consumers (and the decider's audit
    # table) about it. Its Msg-Id makes a retried request's entry harmless.
    key = f"api.mode.{cluster}.{job_id}.{override['id']}"
    entry = AuditEntry(cluster=cluster, job_id=job_id, service="api", action="mode_override",
                       detail=json.dumps({"mode": change.mode, "reason": change.reason, "actor": change.actor,
                                          "override_id": override["id"]}),
                       idempotency_key=key, at=dt.datetime.now(dt.UTC))
    audited = await backends.events.publish(subjects.event_audit(cluster, job_id), entry, key)
    return JSONResponse(status_code=201, content={
        "override": override, "audited": audited,
        "note": "recorded in the ledger; the newest override per job is the one in force" + (
            "" if audited else "; the audit event could not be published (NATS is down) and is not retried"),
    })


class NodeClear(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field("", max_length=1000, description="What was repaired, for the audit trail.")
    actor: str = Field("", max_length=200, description="Who asks (the token is shared, so say it here).")


@router.post("/nodes/{cluster}/{node}/clear", status_code=201,
             summary="Forget a repaired node's record: its exclusions and readings before now stop counting",
             responses={401: {"description": "missing or wrong bearer token"},
                        404: {"description": "the ledger has never heard of the node"},
                        503: {"description": "no token configured, or the ledger is down"}})
async def clear_node(request: Request, cluster: Name, node: Name, clear: NodeClear) -> JSONResponse:
    cleared = await request.app.state.backends.overrides.clear_node(cluster, node, clear.reason, clear.actor)
    if cleared is None:
        raise HTTPException(404, detail=f"node {node} on cluster {cluster} is not known to the ledger (no reading, "
                                        "no attempt ran on it, no Advice excluded it): is the name right?")
    CLEARANCES.inc()
    # The ledger row is the audit record (who, why, when; rows are only added). Live consumers hear
    # of it through the log and /v1/nodes; it belongs to no job, so it has no job audit subject.
    log.info("node %s/%s cleared by %r: %s (%d exclusions forgotten)", cluster, node, clear.actor, clear.reason,
             cleared["forgotten_exclusions"])
    return JSONResponse(status_code=201, content={
        "clearance": cleared,
        "note": "recorded in the ledger; the decider no longer counts this node's exclusions and gpu-probe "
                "readings from before now",
    })
