"""API auth, as a rule over the whole route table: every route that changes state (any method but
GET/HEAD/OPTIONS in the OpenAPI document) refuses a request without the bearer token, or with a wrong one, and changes
nothing; reading needs no token. A route added later without `require_token` fails here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_api_fakes import Fakes, client  # noqa: E402 - the API's in-memory backends, shared with tests/unit

TOKEN = "a-long-enough-token-for-these-tests"
SAFE = {"GET", "HEAD", "OPTIONS"}
PARAMS = {"cluster": "local", "job_id": "101", "node": "node1"}


def changing_routes(api) -> list[tuple[str, str]]:
    """Every (method, path) of the API's OpenAPI document that is not a read."""
    out = []
    for path, ops in api.get("/openapi.json").json()["paths"].items():
        for method in sorted(m.upper() for m in ops if m.upper() not in SAFE):
            out.append((method, re.sub(r"\{(\w+)\}", lambda m: PARAMS.get(m.group(1), "x"), path)))
    return out


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-token-wrong-token"},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer "}])
def test_every_state_changing_route_refuses_without_the_token(tmp_path, headers):
    fakes = Fakes()
    with client(fakes, tmp_path, token=TOKEN) as api:
        routes = changing_routes(api)
        assert ("POST", "/v1/jobs/local/101/mode") in routes
        for method, path in routes:
            resp = api.request(method, path, json={"mode": "observe", "reason": "test"}, headers=headers)
            assert resp.status_code == 401, (method, path, resp.status_code)
    assert fakes.overrides.recorded == [] and fakes.events.published == []


def test_reading_needs_no_token(tmp_path):
    with client(Fakes(), tmp_path, token=TOKEN) as api:
        assert api.get("/v1/jobs").status_code == 200
