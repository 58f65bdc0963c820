"""Each FastStream consumer pulls with its own wait (consumers.Consumer.fetch_timeout_s), and the Advice
is reconciled per job: the reconcile's look-again naks of 0.1-0.45 s come back that soon, and jobs that
fail together do not wait for each other's steps (docs/architecture.md, "Reconcile"; the latency itself
is measured by bench/restart_matrix.py, not here)."""

from __future__ import annotations

from faststream.nats import NatsRouter

from relaunch.common import consumers


def _pull_sub(consumer: consumers.Consumer):
    router = NatsRouter()

    async def handler(body) -> None:
        return None

    consumers.subscriber(router, consumer)(handler)
    (subscriber,) = router.subscribers
    return subscriber.pull_sub


def test_the_subscriber_pulls_with_the_consumers_batch_and_wait():
    for consumer in consumers.ALL:
        if consumer.engine != "faststream":
            continue
        pull = _pull_sub(consumer)
        assert (pull.batch_size, pull.timeout) == (consumer.batch, consumer.fetch_timeout_s), consumer.spec.durable


def test_the_advice_is_reconciled_per_job_with_short_pulls():
    advice = consumers.ACTUATOR_ADVICE
    assert advice.per_subject  # one job's Advice in order, different jobs' at once
    # shorter than the shortest look-again the reconcile plans (0.2 s), so a nak'd Advice is not held back
    assert advice.fetch_timeout_s <= 0.1
    assert consumers.DECIDER_ANOMALIES.fetch_timeout_s <= 0.1
