"""The notifier's dispatcher against a real HTTP receiver (no bus): every event delivered once, each
with its idempotency key; a receiver that is down delays, never loses; a storm becomes a digest; a
refusal is a dead letter, with the URL kept secret; the routes file is validated at start."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from webhook_receiver import Receiver

from relaunch.common.errors import PermanentError, TemporaryError
from relaunch.common.outcomes import Delivery
from relaunch.common.schemas import AuditEntry
from relaunch.notifier.adapters.webhook import Webhooks
from relaunch.notifier.dispatch import Dispatcher
from relaunch.notifier.route_file import RoutesFileError, load_routes

pytestmark = pytest.mark.integration
T0 = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)


def stop(job: int) -> AuditEntry:
    return AuditEntry(cluster="c1", job_id=str(job), service="decider", action="stop",
                      detail=json.dumps({"reason": f"job {job}: application error"}),
                      idempotency_key=f"decider.c1.{job}.0.crash", at=T0)


def routes_file(tmp_path, receiver: Receiver, **extra) -> str:
    (tmp_path / "hook.url").write_text(receiver.url + "\n")
    (tmp_path / "hook.token").write_text("webhook-token-123\n")
    lines = ["[[routes]]", 'name = "ops"', f'url_file = "{tmp_path / "hook.url"}"',
             f'token_file = "{tmp_path / "hook.token"}"', 'events = ["job_stopped", "node_excluded"]']
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    path = tmp_path / "routes.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
async def webhooks():
    hooks = Webhooks()
    yield hooks
    await hooks.close()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


async def test_each_event_is_posted_once_with_its_key_and_the_route_s_token(tmp_path, webhooks):
    receiver = Receiver().up()
    try:
        dispatcher = Dispatcher(load_routes(routes_file(tmp_path, receiver)), webhooks, 0.5, 5)
        results = await dispatcher.dispatch([(dispatcher_notices(stop(i)), Delivery("s", 1, i)) for i in (1, 2)])
        assert results == [None, None]
        assert [p["key"] for p in receiver.posts] == ["job_stopped:decider.c1.1.0.crash",
                                                     "job_stopped:decider.c1.2.0.crash"]
        assert all(p["authorization"] == "Bearer webhook-token-123" for p in receiver.posts)
        assert receiver.posts[0]["body"]["relaunch"]["idempotency_key"] == receiver.posts[0]["key"]
        assert {"text", "blocks"} <= set(receiver.posts[0]["body"])
    finally:
        receiver.down()


def dispatcher_notices(entry):
    from relaunch.notifier.domain.notices import notices_of_audit
    return notices_of_audit(entry)


async def test_a_receiver_that_is_down_gets_everything_later_none_lost_none_twice(tmp_path, webhooks):
    receiver = Receiver()  # not listening yet: connection refused
    dispatcher = Dispatcher(load_routes(routes_file(tmp_path, receiver, per_minute=600, burst=50)), webhooks, 0.5, 5)
    batch = [(dispatcher_notices(stop(i)), Delivery("s", 1, i)) for i in (1, 2)]
    results = await dispatcher.dispatch(batch)
    assert all(isinstance(r, TemporaryError) for r in results) and results[0].delay == 0.5
    again = await dispatcher.dispatch([(n, Delivery("s", 2, d.stream_seq)) for n, d in batch])
    assert again[0].delay == 1.0  # doubled: the second failed try
    receiver.up()
    try:
        assert await dispatcher.dispatch([(n, Delivery("s", 3, d.stream_seq)) for n, d in batch]) == [None, None]
        # Redelivered once more (say the ack was lost): the route took them already, nothing is posted.
        assert await dispatcher.dispatch(batch) == [None, None]
        assert sorted(receiver.event_keys()) == ["job_stopped:decider.c1.1.0.crash",
                                                 "job_stopped:decider.c1.2.0.crash"]
    finally:
        receiver.down()


async def test_a_storm_is_one_digest_and_the_rate_limit_holds_the_rest(tmp_path, webhooks):
    receiver = Receiver().up()
    clock = Clock()
    try:
        routes = load_routes(routes_file(tmp_path, receiver, per_minute=6, burst=1, digest_over=3))
        dispatcher = Dispatcher(routes, webhooks, 0.5, 5, clock=clock)
        storm = [(dispatcher_notices(stop(i)), Delivery("s", 1, i)) for i in range(1, 21)]
        assert await dispatcher.dispatch(storm) == [None] * 20
        (post,) = receiver.posts
        assert post["key"].startswith("digest:") and len(post["body"]["relaunch"]["events"]) == 20
        held = await dispatcher.dispatch([(dispatcher_notices(stop(21)), Delivery("s", 1, 21))])
        assert isinstance(held[0], TemporaryError) and held[0].delay == pytest.approx(10.0)
        clock.now += dt.timedelta(seconds=10)
        assert await dispatcher.dispatch([(dispatcher_notices(stop(21)), Delivery("s", 2, 21))]) == [None]
        assert len(receiver.event_keys()) == len(set(receiver.event_keys())) == 21
    finally:
        receiver.down()


async def test_a_refusal_is_a_dead_letter_without_the_secret_url(tmp_path, webhooks):
    receiver = Receiver().up()
    receiver.fail_with = 404
    try:
        dispatcher = Dispatcher(load_routes(routes_file(tmp_path, receiver)), webhooks, 0.5, 5)
        (result,) = await dispatcher.dispatch([(dispatcher_notices(stop(1)), Delivery("s", 1, 1))])
        assert isinstance(result, PermanentError) and "HTTP 404" in str(result)
        assert receiver.url not in str(result) and str(receiver.port) not in str(result)
    finally:
        receiver.down()


def test_the_routes_file_is_validated_at_start(tmp_path):
    receiver = Receiver()
    good = routes_file(tmp_path, receiver)
    (route,) = load_routes(good)
    assert route.name == "ops" and route.url() == receiver.url and route.token() == "webhook-token-123"
    bad = tmp_path / "bad.toml"
    bad.write_text(open(good).read().replace('"node_excluded"', '"node_exploded"'))
    with pytest.raises(RoutesFileError, match="unknown event kinds"):
        load_routes(str(bad))
    bad.write_text(open(good).read() + "colour = 'red'\n")
    with pytest.raises(RoutesFileError, match="colour"):
        load_routes(str(bad))
    (tmp_path / "hook.url").write_text("")
    with pytest.raises(RoutesFileError, match="is empty"):
        load_routes(good)
