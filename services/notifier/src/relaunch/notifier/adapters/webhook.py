"""Posting to a webhook (the only httpx importer of the notifier).

Outcome of one post: "ok" (2xx), "retry" (a timeout, a connection error, 408, 429 or 5xx: the
receiver may take it later) or "refused" (another 4xx: the URL or the token is wrong, and trying
again will not help; the message is dead-lettered with the receiver's answer, never dropped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRYABLE = {408, 425, 429}


@dataclass(frozen=True)
class PostResult:
    outcome: str
    """ok | retry | refused"""
    detail: str = ""


class Webhooks:
    def __init__(self) -> None:
        self.http = httpx.AsyncClient(follow_redirects=False)

    async def post(self, url: str, token: str, key: str, body: dict, timeout_s: float) -> PostResult:
        headers = {"Content-Type": "application/json", IDEMPOTENCY_HEADER: key, "User-Agent": "relaunch-notifier"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            resp = await self.http.post(url, content=json.dumps(body).encode(), headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            return PostResult("retry", f"{type(exc).__name__}: {exc}"[:300])
        if 200 <= resp.status_code < 300:
            return PostResult("ok")
        detail = f"HTTP {resp.status_code}: {resp.text[:200]}"
        if resp.status_code >= 500 or resp.status_code in RETRYABLE:
            return PostResult("retry", detail)
        return PostResult("refused", detail)

    async def close(self) -> None:
        await self.http.aclose()
