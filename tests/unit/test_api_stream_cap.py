"""The cap on live event streams holds under concurrent opens (issue 35): against the real app served
by uvicorn on a loopback port, with a subscribe that yields to the event loop as NATS's does.

Before the fix the route checked the count, awaited the subscribe, then raised the count: 200
concurrent opens all got 200 from an API capped at 8."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
import uvicorn
from test_api_fakes import Fakes

from relaunch.api.app import create_app
from relaunch.api.settings import ApiSettings

CAP, OPENS = 8, 200


class SlowSubscription:
    """Open until closed; quiet (a heartbeat every `timeout`)."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def next(self, timeout: float):
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
        except TimeoutError:
            return None
        from relaunch.api.adapters.events import StreamClosed
        raise StreamClosed("closed")

    async def close(self) -> None:
        self.closed.set()


class SlowEvents:
    """subscribe takes a few turns of the event loop, as creating a JetStream consumer does."""

    def __init__(self) -> None:
        self.opened = 0

    async def subscribe(self, subject, *, since=None, after_seq=None):
        await asyncio.sleep(0.05)
        self.opened += 1
        return SlowSubscription()


@pytest.fixture
async def served():
    fakes = Fakes()
    fakes.events = SlowEvents()
    app = create_app(ApiSettings(event_streams_max=CAP, event_heartbeat_s=0.5), fakes.connect)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield app, f"http://127.0.0.1:{sock.getsockname()[1]}", fakes.events
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


async def open_stream(http: httpx.AsyncClient, url: str, opened: list, release: asyncio.Event) -> int:
    async with http.stream("GET", url + "/v1/events/stream") as resp:
        opened.append(resp.status_code)
        if resp.status_code == 200:
            await release.wait()  # hold the stream open until every open has an answer
        else:
            await resp.aread()
        return resp.status_code


async def test_concurrent_opens_get_exactly_the_cap(served):
    app, url, events = served
    release = asyncio.Event()
    opened: list[int] = []
    async with httpx.AsyncClient(timeout=20, limits=httpx.Limits(max_connections=None)) as http:
        tasks = [asyncio.create_task(open_stream(http, url, opened, release)) for _ in range(OPENS)]
        async with asyncio.timeout(20):
            while len(opened) < OPENS:
                await asyncio.sleep(0.05)
        assert app.state.open_streams == CAP
        release.set()
        codes = await asyncio.gather(*tasks)
    assert codes.count(200) == CAP and codes.count(503) == OPENS - CAP, codes
    assert events.opened == CAP, "no JetStream consumer is made for a refused stream"
    async with asyncio.timeout(10):  # every slot comes back once the clients leave
        while app.state.open_streams:
            await asyncio.sleep(0.05)
