"""The HTTP API over the ledger: /healthz, /metrics, /v1/jobs, /v1/jobs/{cluster}/{job_id}."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import asyncpg
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


def create_app(database_url: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from .adapters.ledger_read import LedgerReader

        pool = None
        for _ in range(60):
            try:
                pool = await asyncpg.create_pool(database_url, min_size=1, max_size=5, command_timeout=10)
                break
            except (OSError, asyncpg.exceptions.PostgresError):
                await asyncio.sleep(1)
        if pool is None:
            raise RuntimeError(f"Postgres at {database_url} is not reachable")
        app.state.ledger = LedgerReader(pool)
        yield
        await pool.close()

    app = FastAPI(title="relaunch API", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(asyncpg.exceptions.PostgresError)
    @app.exception_handler(OSError)
    async def db_down(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(status_code=503, content={
            "error": "the ledger (Postgres) is not available", "detail": str(exc),
            "hint": "check that Postgres is running (make up) and RELAUNCH_DATABASE_URL"})

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        ok = await request.app.state.ledger.ping()
        return JSONResponse(status_code=200 if ok else 503,
                            content={"service": "api", "ok": ok, "checks": {"postgres": ok}})

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/jobs")
    async def jobs(request: Request, cluster: str | None = None, limit: int = Query(50, ge=1, le=1000),
                   offset: int = Query(0, ge=0)) -> dict:
        items = await request.app.state.ledger.jobs(cluster, limit, offset)
        return {"jobs": items, "limit": limit, "offset": offset}

    @app.get("/v1/jobs/{cluster}/{job_id}")
    async def job(request: Request, cluster: str, job_id: str) -> dict:
        found = await request.app.state.ledger.job(cluster, job_id)
        if found is None:
            raise HTTPException(404, detail=f"job {job_id} on cluster {cluster} is not in the ledger "
                                            "(is its comment opted in with 'relaunch'?)")
        return found

    return app
