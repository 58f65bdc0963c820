"""The consumers in docs/custom-consumer.md (the FastStream program and its nats-py twin) run as printed:
they import, and they ack, retry or give up on each Advice as the page says (webhook answers faked with
httpx's MockTransport). tests/e2e/test_custom_consumer.py runs them against the stack."""

from __future__ import annotations

import datetime as dt
import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from page_programs import CUSTOM_CONSUMER as DOC
from page_programs import programs

from relaunch.common.schemas import Advice, dump

NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def load(name: str, tmp_path: Path):
    """The page's `# file: NAME` program, imported as printed."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    program = programs(DOC)[name]  # as the end-to-end tier and the compose demo run it
    for block in blocks:
        compile(block, str(DOC), "exec")  # every snippet on the page is valid Python
    path = tmp_path / name
    path.write_text(program)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def example(tmp_path):
    """The nats-py program (its `handle` takes nats-py's message)."""
    return load("advice_webhook_nats.py", tmp_path)


@pytest.fixture
def faststream_example(tmp_path, monkeypatch):
    """The FastStream program: importing it makes the broker (no connection yet) and reads WEBHOOK_URL."""
    monkeypatch.setenv("RELAUNCH_NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("WEBHOOK_URL", "https://hooks.example.org/relaunch")
    monkeypatch.delenv("RELAUNCH_NATS_USER", raising=False)
    monkeypatch.delenv("RELAUNCH_NATS_PASSWORD_FILE", raising=False)
    return load("advice_webhook.py", tmp_path)


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


OUTCOMES = [
    (200, ("ack",), "sent local.7.1 (delivery 3)"),
    (503, ("nak", 8.0), "retry local.7.1"),
    (429, ("nak", 8.0), "retry local.7.1"),
    (httpx.ConnectError("refused"), ("nak", 8.0), "retry local.7.1"),
    (400, ("term",), "refused (400) local.7.1"),
]


@pytest.mark.parametrize("status, outcome, result", OUTCOMES)
async def test_the_documented_consumer_acks_only_what_the_webhook_took(example, status, outcome, result):
    msg = Msg(advice_bytes(), delivered=3)
    got, seen = await post_with(example, status, msg)
    assert (got, msg.outcome) == (result, outcome)
    assert seen[0].headers["Idempotency-Key"] == "local.7.1"  # one decision: cluster, job, generation
    assert '"exclude_nodes":["node3"]' in seen[0].read().decode()


class FastStreamMsg:
    """What the FastStream handler uses of faststream.nats.NatsMessage: ack, nack(delay), reject, raw_message."""

    def __init__(self, raw: Msg) -> None:
        self.raw_message, self.outcome = raw, None

    async def ack(self):
        self.outcome = ("ack",)

    async def nack(self, delay=None):
        self.outcome = ("nak", delay)

    async def reject(self):
        self.outcome = ("term",)


@pytest.mark.parametrize("status, outcome, result", OUTCOMES)
async def test_the_documented_faststream_consumer_acks_only_what_the_webhook_took(faststream_example, status, outcome,
                                                                                  result, capsys):
    from relaunch import client

    seen = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if isinstance(status, Exception):
            raise status
        return httpx.Response(status)

    faststream_example.http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    raw = Msg(advice_bytes(), delivered=3)
    advice = await client.decoder(Advice)(SimpleNamespace(body=raw.data))
    msg = FastStreamMsg(raw)
    await faststream_example.forward(advice, msg)
    assert msg.outcome == outcome
    assert capsys.readouterr().out.strip() == f"relaunch.advice.local.7: {result}"
    body = seen[0].read().decode()
    assert seen[0].headers["Idempotency-Key"] == "local.7.1"
    assert "relaunch restarts job 7 on local, attempt 0 without node3: xid 79 on node3" in body
    await faststream_example.close_http()


async def test_the_documented_faststream_consumer_rejects_what_it_cannot_read(faststream_example, capsys):
    from relaunch import client

    raw = Msg(b'{"schema": "relaunch.something_new/v9"}')
    assert await client.decoder(Advice)(SimpleNamespace(body=raw.data)) is None
    msg = FastStreamMsg(raw)
    await faststream_example.forward(None, msg)
    assert msg.outcome == ("term",) and "skipped" in capsys.readouterr().out


async def test_the_documented_consumer_gives_up_on_what_it_cannot_read(example):
    msg = Msg(b'{"schema": "relaunch.something_new/v9"}')
    got, seen = await post_with(example, 200, msg)
    assert (got, msg.outcome, seen) == ("skipped", ("term",), [])


async def test_the_documented_nats_py_consumer_waits_on_through_either_kind_of_empty_fetch(example, monkeypatch):
    """nats-py 2.16's fetch() raises nats.errors.TimeoutError when nothing came, and on one path (its second,
    lingering pull request with no time left) a bare asyncio.TimeoutError: the page's loop must take both
    as "nothing new" and go on, not end the consumer (it caught only the first once)."""
    import asyncio

    import nats.errors

    stop = asyncio.Event()
    raised = [nats.errors.TimeoutError(), asyncio.TimeoutError()]
    delivered = Msg(advice_bytes())

    class Sub:
        async def fetch(self, batch, timeout):
            if raised:
                raise raised.pop(0)
            stop.set()
            return [delivered]

    class Conn:
        def jetstream(self):
            return SimpleNamespace(pull_subscribe_bind=self.bind)

        async def bind(self, *args, **kwargs):
            return Sub()

        async def flush(self):
            pass

        async def close(self):
            pass

    async def connect():
        return Conn()

    monkeypatch.setattr(example.client, "connect", connect)
    monkeypatch.setattr(example.client, "pull_inbox", lambda: "_INBOX.test")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    real_client = httpx.AsyncClient
    monkeypatch.setattr(example.httpx, "AsyncClient",
                        lambda **kw: real_client(transport=httpx.MockTransport(answer)))
    await asyncio.wait_for(example.forward("https://hooks.example.org/relaunch", stop), 5)
    assert raised == [] and delivered.outcome == ("ack",)
