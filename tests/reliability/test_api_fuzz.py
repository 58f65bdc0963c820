"""The API under a real fuzzer: schemathesis generates requests from the API's own OpenAPI document
(/openapi.json of the running test stack's API), without a token and with the operator's token.

What must hold for every generated request (docs/api.md, "Errors"):
- no server error (5xx), except the 503 an endpoint documents for a backend it cannot reach;
- no auth bypass: without the bearer token no endpoint that changes state answers anything but 401
  (or 503 when changing state is off);
- every error is a JSON body a person can act on: `{"detail": ...}` saying what was wrong.

The live event stream (an endless response) is left out. Run once (the API does not depend on the
Slurm release). Results: test-artifacts/reliability/api-fuzz.json (docs/reliability.md's notes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from faults import ONE_RELEASE, RESULTS_ROOT, SLURM

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(SLURM != ONE_RELEASE, reason="the API does not depend on Slurm: fuzzed on one release")]

MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
EXAMPLES = int(os.environ.get("RELAUNCH_FUZZ_EXAMPLES", "40"))
SEEN: dict[str, dict[str, int]] = {}


def _schema(services):
    schema = schemathesis.openapi.from_url(f"{services['RELAUNCH_API_URL']}/openapi.json", wait_for_schema=30)
    return schema.exclude(path_regex=r"/events/stream")


def _fuzz(services, authenticated: bool) -> None:
    """Every operation of the document, EXAMPLES generated requests each (hypothesis; schemathesis's
    strategies, driven here rather than through its pytest plugin)."""
    headers = {"Authorization": f"Bearer {_token(services)}"} if authenticated else {}
    operations = 0
    for result in _schema(services).get_all_operations():
        operation = result.ok()
        operations += 1

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def run(case):
            _check(case, case.call(headers=headers, timeout=10), authenticated)

        run()
    assert operations >= 5, f"only {operations} operations in the API's OpenAPI document"


def _token(services) -> str:
    return (Path(services["RELAUNCH_RUN_DIR"]) / "api-token").read_text().strip()


def _check(case, response, authenticated: bool) -> None:
    method = case.method.upper()
    key = f"{'token' if authenticated else 'anonymous'} {method} {case.path}"
    counts = SEEN.setdefault(key, {})
    counts[str(response.status_code)] = counts.get(str(response.status_code), 0) + 1
    _record()
    where = f"{method} {case.path} ({'with' if authenticated else 'without'} the token) -> {response.status_code}"
    assert response.status_code < 500 or response.status_code == 503, f"server error: {where}: {response.text[:500]}"
    if not authenticated and method in MUTATING:
        assert response.status_code in (401, 503), f"auth bypass: {where}"
    if response.status_code >= 400:
        kind = _header(response, "content-type")
        assert kind.startswith("application/json"), f"an error that is not JSON: {where}: {kind}"
        body = response.json()
        assert isinstance(body, dict) and body.get("detail"), f"an error without a detail: {where}: {body}"


def _header(response, name: str) -> str:
    value = response.headers.get(name) or ""
    return value[0] if isinstance(value, list) and value else value if isinstance(value, str) else ""


def _record() -> None:
    RESULTS_ROOT.mkdir(parents=True, exist_ok=True)
    requests = sum(sum(c.values()) for c in SEEN.values())
    errors5 = sum(n for c in SEEN.values() for s, n in c.items() if s.startswith("5") and s != "503")
    (RESULTS_ROOT / "api-fuzz.json").write_text(json.dumps(
        {"tool": f"schemathesis {schemathesis.SCHEMATHESIS_VERSION}", "requests": requests,
         "operations": len({k.split(' ', 1)[1] for k in SEEN}), "server_errors": errors5, "by_operation": SEEN},
        indent=2) + "\n")


def test_the_api_without_a_token(services):
    _fuzz(services, authenticated=False)


def test_the_api_with_the_operators_token(services):
    _fuzz(services, authenticated=True)
