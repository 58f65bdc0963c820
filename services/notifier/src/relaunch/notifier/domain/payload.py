"""payload(notices, now) -> a Slack-compatible webhook body, and its idempotency key. Pure.

Slack's incoming webhooks (and Mattermost, Rocket.Chat, Discord's /slack endpoint) take
`{"text": ..., "blocks": [...]}`: `text` is the fallback a notification shows, `blocks` the message.
relaunch adds a `relaunch` object (a receiver that is not Slack reads the event from it):
  {"idempotency_key", "kind", "events": [{"key", "kind", "cluster", "job_id", "nodes", "at", "title", "text"}]}
One notice is one message; several (a storm, docs/notifications.md "Rate limit and digest") are one
digest whose key is derived from its events' keys, so a retried digest has the same key, and each
event's own key is inside it.

Invariants: text is escaped for Slack's mrkdwn (&, <, >), so a log line can never ping a channel or
forge a link; each block stays under Slack's limits (3,000 characters a section, 50 blocks).
"""

from __future__ import annotations

import datetime as dt
import hashlib

from .notices import Notice

SECTION_MAX = 2900
DIGEST_LINES = 20
"""A digest lists this many events; the rest are counted ("and 7 more")."""


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def key_of(notices: list[Notice]) -> str:
    if len(notices) == 1:
        return notices[0].key
    digest = hashlib.sha256("\n".join(sorted(n.key for n in notices)).encode()).hexdigest()[:24]
    return f"digest:{digest}"


def _event(n: Notice) -> dict:
    return {"key": n.key, "kind": n.kind, "cluster": n.cluster, "job_id": n.job_id, "nodes": list(n.nodes),
            "at": n.at.isoformat(), "title": n.title, "text": n.text}


def _when(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def payload(notices: list[Notice], metadata: bool = True) -> dict:
    if not notices:
        raise ValueError("a payload needs at least one notice")
    key = key_of(notices)
    if len(notices) == 1:
        (n,) = notices
        where = " · ".join(x for x in ("relaunch", n.cluster, f"job {n.job_id}" if n.job_id else "", n.kind) if x)
        text = f"{n.title}: {n.text}"
        blocks = [
            {"type": "section", "text": {"type": "mrkdwn", "text": escape(f"*{n.title}*\n{n.text}")[:SECTION_MAX]}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": escape(f"{where} · {_when(n.at)}")}]},
        ]
    else:
        kinds = sorted({n.kind for n in notices})
        span = f"{_when(min(n.at for n in notices))} to {_when(max(n.at for n in notices))}"
        text = f"relaunch: {len(notices)} events ({', '.join(kinds)}), {span}"
        lines = [f"• {n.title}: {n.text}"[:300] for n in notices[:DIGEST_LINES]]
        if len(notices) > DIGEST_LINES:
            lines.append(f"… and {len(notices) - DIGEST_LINES} more")
        blocks = [
            {"type": "section", "text": {"type": "mrkdwn", "text": escape(f"*{text}*")[:SECTION_MAX]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": escape("\n".join(lines))[:SECTION_MAX]}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "relaunch digest: events came faster "
                                                                         "than this route's rate limit"}]},
        ]
    body: dict = {"text": escape(text)[:SECTION_MAX], "blocks": blocks}
    if metadata:
        body["relaunch"] = {"idempotency_key": key, "kind": notices[0].kind if len(notices) == 1 else "digest",
                            "events": [_event(n) for n in notices]}
    return body
