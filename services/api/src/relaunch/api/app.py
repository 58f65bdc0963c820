"""The HTTP API: the ledger (/v1/jobs, /v1/advice, /v1/nodes), live events (/v1/events/stream), the
operator's mode override, /healthz, /metrics, OpenAPI (/openapi.json, /docs) and the dashboard (/)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles

from relaunch.common.periodic import every

from . import errors, openapi_doc
from .auth import TokenFile
from .backends import Backends
from .metrics import RequestMetrics, goodput_refresher
from .routes import events, ledger, operator, pictures, system
from .settings import ApiSettings

Connect = Callable[[], AbstractAsyncContextManager[Backends]]

DESCRIPTION = """Read relaunch's ledger and follow its events. Reads need no credentials (serve the API on
a trusted network or behind your proxy's authentication), except the log lines quoted as evidence:
where a token is configured, those need it too (`evidence_withheld` says where they were left out).
Endpoints that change state need `Authorization: Bearer <token>` with the token from the file named
by RELAUNCH_API_TOKEN_FILE.
Errors are JSON: `{"error", "detail", "hint"?}`. See docs/api.md."""


def _goodput_failed(exc: Exception) -> None:
    """The gauges keep their last values while the ledger cannot be read; the loop goes on."""
    logging.getLogger(__name__).warning("fleet goodput gauges not refreshed: %s", exc)


def create_app(settings: ApiSettings, connect: Connect) -> FastAPI:
    """`connect()` yields the backends for the app's lifetime (relaunch.api.backends.connect, or fakes)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with connect() as backends:
            app.state.backends = backends
            stop = asyncio.Event()
            refresh = None
            if settings.goodput_refresh_s > 0 and hasattr(backends.ledger, "goodput"):
                refresh = asyncio.create_task(every(
                    settings.goodput_refresh_s, goodput_refresher(backends.ledger, settings.goodput_window_s), stop,
                    on_error=_goodput_failed))
            try:
                yield
            finally:
                stop.set()
                if refresh is not None:
                    await refresh

    app = FastAPI(title="relaunch API", version="0.2.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.tokens = TokenFile(settings.token_file)
    app.state.open_streams = 0
    errors.install(app)
    for module in (system, ledger, pictures, events, operator):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=system.STATIC), name="static")
    if settings.cors_origins:
        # Off unless configured: a browser on another site must not read the ledger by default.
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type", "Last-Event-ID"])
    app.add_middleware(RequestMetrics)

    def openapi() -> dict:
        """FastAPI's document, rewritten to say what the API really returns (openapi_doc)."""
        if app.openapi_schema is None:
            app.openapi_schema = openapi_doc.document(get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi
    return app
