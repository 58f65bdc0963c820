"""Health, metrics and the dashboard (static files shipped in the package: no build step)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

STATIC = Path(__file__).resolve().parent.parent / "static"

# The dashboard loads nothing from elsewhere and never evaluates strings as code; log text it shows
# is untrusted, so this policy is a second fence behind its use of textContent.
DASHBOARD_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter(tags=["system"])


@router.get("/healthz", summary="200 when the ledger answers; NATS is reported, not required")
async def healthz(request: Request) -> JSONResponse:
    backends = request.app.state.backends
    postgres = await backends.ledger.ping()
    nats = bool(backends.events.connected)
    # Without NATS only live events stop; restarting the API would not bring NATS back.
    return JSONResponse(status_code=200 if postgres else 503,
                        content={"service": "api", "ok": postgres, "checks": {"postgres": postgres, "nats": nats}})


@router.get("/metrics", summary="Prometheus metrics")
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@router.get("/", include_in_schema=False)
async def dashboard() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html", headers=DASHBOARD_HEADERS)
