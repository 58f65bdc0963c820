"""The complete consumer in docs/custom-consumer.md runs as printed: it imports, and it acks,
retries or gives up on each Advice as the page says (webhook answers faked with httpx's MockTransport)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from relaunch.common.schemas import Advice, dump

DOC = Path(__file__).resolve().parents[2] / "docs" / "custom-consumer.md"
NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    (program,) = [b for b in blocks if b.startswith("# file: advice_webhook.py")]
    for block in blocks:
        compile(block, str(DOC), "exec")  # every snippet on the page is valid Python
    path = tmp_path_factory.mktemp("doc") / "advice_webhook.py"
    path.write_text(program)
    spec = importlib.util.spec_from_file_location("advice_webhook", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Msg:
    def __init__(self, data: bytes, delivered: int = 1) -> None:
        self.data, self.subject = data, "relaunch.advice.local.7"
        self.metadata = SimpleNamespace(num_delivered=delivered)
        self.outcome: tuple | None = None

    async def ack(self):
        self.outcome = ("ack",)

    async def nak(self, delay=None):
        self.outcome = ("nak", delay)

    async def term(self):
        self.outcome = ("term",)


def advice_bytes() -> bytes:
    return dump(Advice(cluster="local", job_id="7", attempt=0, generation=1, operation="restart",
                       exclude_nodes=["node3"], reason="xid 79 on node3", issued_at=NOW, expires_at=NOW))


async def post_with(example, status: int | Exception, msg: Msg) -> tuple[str, list]:
    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(status, Exception):
            raise status
        return httpx.Response(status)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        result = await example.handle(msg, http, "https://hooks.example.org/relaunch")
    return result, seen


@pytest.mark.parametrize("status, outcome, result", [
    (200, ("ack",), "sent"),
    (503, ("nak", 8.0), "retry"),
    (429, ("nak", 8.0), "retry"),
    (httpx.ConnectError("refused"), ("nak", 8.0), "retry"),
    (400, ("term",), "refused (400)"),
])
async def test_the_documented_consumer_acks_only_what_the_webhook_took(example, status, outcome, result):
    msg = Msg(advice_bytes(), delivered=3)
    got, seen = await post_with(example, status, msg)
    assert (got, msg.outcome) == (result, outcome)
    body = seen[0].read().decode()
    assert "relaunch restarts job 7 on local, attempt 0 without node3: xid 79 on node3" in body


async def test_the_documented_consumer_gives_up_on_what_it_cannot_read(example):
    msg = Msg(b'{"schema": "relaunch.something_new/v9"}')
    got, seen = await post_with(example, 200, msg)
    assert (got, msg.outcome, seen) == ("skipped", ("term",), [])
