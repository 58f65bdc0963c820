"""Every error leaves the API as JSON a person can act on:
    {"error": "<what kind>", "detail": "<what happened and what to do>", "hint"?: ..., "fields"?: [...]}
`detail` stays a string because `relaunch` (the CLI) prints it as is.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .adapters.postgres import BAD_VALUE, SCHEMA_TOO_OLD, UNAVAILABLE

log = logging.getLogger(__name__)

_KINDS = {400: "bad request", 401: "unauthorized", 403: "forbidden", 404: "not found", 405: "method not allowed",
          409: "conflict", 422: "invalid request", 503: "unavailable"}


def problem(status: int, detail: str, hint: str | None = None, headers: dict | None = None, **extra) -> JSONResponse:
    body = {"error": _KINDS.get(status, "error"), "detail": detail, **({"hint": hint} if hint else {}), **extra}
    return JSONResponse(status_code=status, content=body, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"there is no endpoint at {request.url.path}; the API is described at /docs and /openapi.json"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}; see /docs for what is"
        return problem(exc.status_code, detail, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [{"where": ".".join(str(p) for p in e.get("loc", ())), "message": e.get("msg", ""),
                   "got": _short(e.get("input"))} for e in exc.errors()]
        detail = "; ".join(f"{f['where']}: {f['message']}" for f in fields[:5]) or "the request is not valid"
        return problem(422, detail, hint="see /docs for each endpoint's parameters", fields=fields)

    @app.exception_handler(SCHEMA_TOO_OLD)
    async def old_schema(request: Request, exc: Exception) -> JSONResponse:
        return problem(503, f"the ledger's schema is older than this API ({exc})",
                       hint="start or restart the decider: it applies the ledger's migrations")

    @app.exception_handler(BAD_VALUE)
    async def bad_value(request: Request, exc: Exception) -> JSONResponse:
        # Found by the fuzzer (tests/reliability/test_api_fuzz.py): a NUL character in a filter, say.
        return problem(422, f"a value in the request cannot be looked up: {str(exc)[:200]}",
                       hint="text may not hold NUL characters (U+0000); see /docs for each parameter's range")

    async def db_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("ledger unavailable: %s", exc)
        return problem(503, f"the ledger (Postgres) is not available: {exc}",
                       hint="check that Postgres is running (make up) and RELAUNCH_DATABASE_URL")

    for unavailable in UNAVAILABLE:
        app.add_exception_handler(unavailable, db_down)

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem(500, f"the API failed unexpectedly ({type(exc).__name__}); this is a bug in relaunch",
                       hint="the API's log has the traceback; please report it with the request")


def _short(value: object) -> object:
    if isinstance(value, str | int | float | bool) or value is None:
        return value if not isinstance(value, str) else value[:200]
    return str(value)[:200]
