"""Prometheus metrics of the notifier (deploy/grafana/relaunch.json has a panel over each)."""

from __future__ import annotations

from prometheus_client import Counter

POSTS = Counter("relaunch_notifier_posts_total", "Webhook posts, by route and outcome (ok | retry | refused)",
                ["route", "outcome"])
EVENTS = Counter("relaunch_notifier_events_total",
                 "Events by route, kind and outcome: delivered (alone or in a digest), retried (a post failed; "
                 "redelivered after a back-off), held (rate limit; redelivered when a token is back), refused",
                 ["route", "kind", "outcome"])
DIGESTS = Counter("relaunch_notifier_digests_total", "Digest posts (several events in one), by route", ["route"])
