"""Attack: opening the API's live event stream (`GET /v1/events/stream`, server-sent events) 200 times at once
(issue 35, item 6). Each open stream holds a JetStream consumer; the cap (RELAUNCH_API_EVENT_STREAMS_MAX)
was counted after the subscribe's await, so concurrent opens all passed the check (200 of 200 served).

Proves the threat model's line "anyone who reaches the API without the token ... may cause: a bounded number of
live streams" (docs/security.md, "Threat model"): at most the cap are served, every other open is refused
(429 or 503), and the slots come back when the clients leave."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest
from slurmjobs import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=3.7)]

OPENS = 200
CAP = int(os.environ.get("RELAUNCH_API_EVENT_STREAMS_MAX", "64"))
"""The API's default cap (relaunch.api.settings.ApiSettings.event_streams_max); the test stack sets none."""


async def open_at_once(base: str, n: int) -> list[int | str]:
    """n opens at once, each held until every one has its answer; the status codes (or the error)."""
    answers: list[int | str] = []
    everyone = asyncio.Event()
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(120, connect=60), limits=limits) as client:
        async def one() -> None:
            try:
                async with client.stream("GET", "/v1/events/stream") as answer:
                    answers.append(answer.status_code)
                    if len(answers) == n:
                        everyone.set()
                    await asyncio.wait_for(everyone.wait(), 150)
            except (httpx.HTTPError, TimeoutError) as exc:
                answers.append(type(exc).__name__)
                if len(answers) == n:
                    everyone.set()

        await asyncio.gather(*(one() for _ in range(n)))
    return answers


def test_two_hundred_concurrent_stream_opens_get_at_most_the_cap(services):
    base = services["RELAUNCH_API_URL"]
    answers = asyncio.run(open_at_once(base, OPENS))
    served = answers.count(200)
    refused = [a for a in answers if a != 200]
    assert 1 <= served <= CAP, f"{served} of {OPENS} concurrent opens were served (cap {CAP})"
    assert set(refused) <= {429, 503}, sorted(map(str, set(refused)))
    print(f"streams: {served} served, {len(refused)} refused ({sorted(map(str, set(refused)))})")

    # The clients left: their slots are given back, and one more open is served again.
    async def one_more() -> int:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            async with client.stream("GET", "/v1/events/stream") as answer:
                return answer.status_code

    wait_until("a stream served again after the clients left", lambda: asyncio.run(one_more()) == 200, 60)
