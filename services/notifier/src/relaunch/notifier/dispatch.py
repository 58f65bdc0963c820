"""The notifier's shell: one pull of messages -> notices -> each route's plan -> posts -> one result
per message (None: ack; TemporaryError: redelivered later; PermanentError: dead-lettered).

Invariants:
- a message is acked only when every route that wants its notices has taken them (2xx) or refused
  them for good (then it is dead-lettered with the receiver's answer): nothing is lost, across
  restarts too, since an unacked message stays in its stream for the notifier's durable consumer;
- a route that took a notice is not posted it again while the notifier runs, even when another route
  makes the message come back (`taken`, bounded); only a crash between a receiver's 2xx and the ack
  can repeat a post, with the same idempotency key, which the receiver may drop;
- the three consumers' pulls are dispatched one at a time (a lock): the rate limit is per route,
  whatever consumer the events came from.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import Callable

from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.schemas import AuditEntry, DeadLetter, ReconcileStatus

from .adapters.webhook import PostResult, Webhooks
from .domain import pacing
from .domain.notices import Notice, notices_of_audit, notices_of_dead_letter, notices_of_reconcile
from .domain.payload import key_of, payload
from .metrics import DIGESTS, EVENTS, POSTS
from .route_file import Route, RoutesFileError

log = logging.getLogger(__name__)

TAKEN_MAX = 100_000
"""(route, key) pairs remembered as taken: far more than a pull's redeliveries can span."""


class Dispatcher:
    def __init__(self, routes: tuple[Route, ...], webhooks: Webhooks, retry_base_s: float, retry_max_s: float,
                 clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.routes, self.webhooks, self.clock = routes, webhooks, clock
        self.retry_base_s, self.retry_max_s = retry_base_s, retry_max_s
        self.buckets: dict[str, pacing.Bucket] = {}
        self.taken: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.refused: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.lock = asyncio.Lock()

    async def on_audit(self, items: list[tuple[AuditEntry, Delivery]]) -> list[Exception | None]:
        return await self.dispatch([(notices_of_audit(m), d) for m, d in items])

    async def on_reconcile(self, items: list[tuple[ReconcileStatus, Delivery]]) -> list[Exception | None]:
        return await self.dispatch([(notices_of_reconcile(m), d) for m, d in items])

    async def on_dead_letter(self, items: list[tuple[DeadLetter, Delivery]]) -> list[Exception | None]:
        return await self.dispatch([(notices_of_dead_letter(m, d.stream_seq), d) for m, d in items])

    async def dispatch(self, items: list[tuple[list[Notice], Delivery]]) -> list[Exception | None]:
        async with self.lock:
            retry: dict[int, float] = {}
            for route in self.routes:
                await self._route(route, items, retry)
        results: list[Exception | None] = []
        for i, (notices, _) in enumerate(items):
            if i in retry:
                results.append(TemporaryError("a webhook has not taken it yet", delay=retry[i]))
                continue
            refused = [self.refused[(r.name, n.key)] for n in notices for r in self.routes
                       if (r.name, n.key) in self.refused]
            results.append(PermanentError(f"refused by a webhook: {refused[0]}") if refused else None)
        return results

    async def _route(self, route: Route, items: list[tuple[list[Notice], Delivery]], retry: dict[int, float]) -> None:
        owner: dict[str, int] = {}
        wanted: list[Notice] = []
        for i, (notices, _) in enumerate(items):
            for n in notices:
                pair = (route.name, n.key)
                if route.wants(n.kind, n.cluster) and pair not in self.taken and pair not in self.refused \
                        and n.key not in owner:
                    owner[n.key] = i
                    wanted.append(n)
        if not wanted:
            return
        now = self.clock()
        plan = pacing.plan(wanted, self.buckets.get(route.name), route.per_minute, route.burst, route.digest_over,
                           now)
        self.buckets[route.name] = plan.bucket
        for n in plan.held:
            EVENTS.labels(route.name, n.kind, "held").inc()
            self._later(retry, owner[n.key], plan.retry_in)
        for post in plan.posts:
            result = await self._post(route, list(post))
            POSTS.labels(route.name, result.outcome).inc()
            if len(post) > 1 and result.outcome == "ok":
                DIGESTS.labels(route.name).inc()
            for n in post:
                i = owner[n.key]
                if result.outcome == "ok":
                    EVENTS.labels(route.name, n.kind, "delivered").inc()
                    self._remember(self.taken, (route.name, n.key), None)
                elif result.outcome == "retry":
                    EVENTS.labels(route.name, n.kind, "retried").inc()
                    delay = pacing.backoff(items[i][1].num_delivered, self.retry_base_s, self.retry_max_s)
                    self._later(retry, i, delay)
                else:
                    EVENTS.labels(route.name, n.kind, "refused").inc()
                    self._remember(self.refused, (route.name, n.key), f"route {route.name}: {result.detail}")
            if result.outcome != "ok":
                log.warning("route %s: %d event(s) not taken (%s): %s", route.name, len(post), result.outcome,
                            result.detail)

    async def _post(self, route: Route, notices: list[Notice]) -> PostResult:
        try:
            url, token = route.url(), route.token()
        except RoutesFileError as exc:  # a secret file went missing: the operator can put it back
            return PostResult("retry", str(exc))
        result = await self.webhooks.post(url, token, key_of(notices), payload(notices, route.metadata),
                                          route.timeout_s)
        # The URL is a secret (it carries the webhook's token): never in a log line or a dead letter.
        return PostResult(result.outcome, result.detail.replace(url, "<webhook url>"))

    @staticmethod
    def _later(retry: dict[int, float], index: int, delay: float) -> None:
        retry[index] = max(retry.get(index, 0.0), delay)

    @staticmethod
    def _remember(store: OrderedDict, pair: tuple[str, str], value) -> None:
        store[pair] = value
        store.move_to_end(pair)
        while len(store) > TAKEN_MAX:
            store.popitem(last=False)
