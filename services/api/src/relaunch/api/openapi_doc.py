"""The OpenAPI document says what the API really returns (issue 41; docs/api.md, "Errors"): every error is
relaunch's own JSON body (errors.problem: `error`, `detail`, `hint`?, `fields`?), not FastAPI's
HTTPValidationError; the status codes each endpoint can give are listed (404 where a path names a job or a
node, 400 for a body that is not what the endpoint reads, 503 while the ledger is unavailable); /metrics is
Prometheus' text format. tests/unit/test_api_openapi.py runs schemathesis with every check against it."""

from __future__ import annotations

from typing import Any

ERROR = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "title": ERROR, "type": "object", "required": ["error", "detail"],
    "properties": {
        "error": {"type": "string", "description": "the kind of error: invalid request, not found, unavailable..."},
        "detail": {"type": "string", "description": "what happened and what to do"},
        "hint": {"type": "string"},
        "fields": {"type": "array", "description": "for an invalid request: each parameter found wrong",
                   "items": {"type": "object", "properties": {
                       "where": {"type": "string"}, "message": {"type": "string"}, "got": {}}}},
    },
}
WHY = {400: "the request's body is not what this endpoint reads", 404: "the job or node is not in the ledger",
       422: "a parameter or the body is not valid (`fields` says which)",
       503: "the ledger (Postgres) is unavailable, or this change of state is turned off"}
PROMETHEUS = "text/plain; version=1.0.0; charset=utf-8"


def _error(code: int, description: str | None = None) -> dict:
    return {"description": description or WHY.get(code, "an error"),
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR}"}}}}


def document(schema: dict) -> dict:
    """Rewrite FastAPI's generated document in place (and return it)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    components[ERROR] = ERROR_SCHEMA
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for code, response in list(responses.items()):
                if code[:1] in "45":
                    responses[code] = _error(int(code), response.get("description"))
            if path == "/metrics":
                responses["200"] = {"description": "Prometheus metrics",
                                    "content": {PROMETHEUS: {"schema": {"type": "string"}}}}
                continue
            if path.startswith("/v1/") or path == "/healthz":
                responses.setdefault("503", _error(503))
                if operation.get("parameters") or operation.get("requestBody"):
                    responses.setdefault("422", _error(422))
            if "{" in path:
                responses.setdefault("404", _error(404))
            if method == "post":
                responses.setdefault("400", _error(400))
    return schema
