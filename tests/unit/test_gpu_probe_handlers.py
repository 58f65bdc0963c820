"""The probe's shell with the bus in memory: what it publishes, when, and how it answers injections
(its router on FastStream's TestNatsBroker)."""

import asyncio
import datetime as dt

import pytest
from faststream.exceptions import SubscriberNotFound
from faststream.nats import NatsBroker, TestNatsBroker

from relaunch.common import subjects
from relaunch.common.schemas import FaultInjection, InjectionAck, NodeHealth, dump
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.domain.samples import Sample
from relaunch.gpu_probe.handlers import Probe, ProbeConfig
from relaunch.gpu_probe.router import router

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


class MemoryBus:
    """Where the probe's NodeHealth publications go (inject requests reach it through TestNatsBroker)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, NodeHealth]] = []
        self.down = False

    async def publish(self, subject, model, msg_id=None):
        if self.down:
            raise ConnectionError("nats is down")
        self.published.append((subject, model))
        return True


def make_probe(backend=None, interval_s=30.0):
    bus = MemoryBus()
    config = ProbeConfig(cluster="c1", node="node2", expected_gpus=8, interval_s=interval_s, event_wait_s=0.05)
    return Probe(bus, backend or FakeNvml(8), config, clock=lambda: NOW), bus


def injection(**kw) -> bytes:
    return dump(FaultInjection(**{"cluster": "c1", "node": "node2", "requested_at": NOW, **kw}))


async def wait_for(bus: MemoryBus, predicate, timeout=2.0) -> NodeHealth:
    async with asyncio.timeout(timeout):
        while True:
            for _, health in bus.published:
                if predicate(health):
                    return health
            await asyncio.sleep(0.01)


async def ask(broker, data: bytes, node: str = "node2") -> InjectionAck:
    """A `relaunch inject` request through the broker; the probe's reply."""
    reply = await broker.request(data, subjects.control_inject("c1", node), timeout=2)
    return InjectionAck.model_validate_json(reply.body)


@pytest.fixture
async def running():
    """A probe whose tasks run and whose router answers in memory, with a 30 s interval: any quick
    publication after the first is event-driven."""
    probe, bus = make_probe()
    broker = NatsBroker()
    broker.include_router(router(probe))
    async with TestNatsBroker(broker) as memory:
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(t) for t in probe.tasks(stop)]
        await wait_for(bus, lambda h: h.trigger == "start")
        yield probe, bus, memory
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_publication_is_a_heartbeat_that_says_its_period():
    probe, bus = make_probe()
    health = await probe.publish_once()
    subject, published = bus.published[0]
    assert subject == subjects.signal_node("c1", "node2") and published == health
    assert (health.verdict, health.trigger, health.seq, health.interval_s) == ("healthy", "interval", 1, 30.0)
    assert (health.gpu_count, health.expected_gpus, health.backend, health.at) == (8, 8, "fake", NOW)
    assert (await probe.publish_once()).seq == 2


async def test_an_injected_xid_is_published_at_once_as_failed(running):
    _, bus, broker = running
    answer = await ask(broker, injection(fault="xid", code=79, gpu=1))
    assert answer.accepted and answer.detail == "XID 79 on GPU 1"
    health = await wait_for(bus, lambda h: h.trigger == "xid", timeout=1.0)
    assert health.verdict == "failed" and any("XID 79" in r for r in health.reasons)
    assert [(x.gpu, x.code, x.xid_class) for x in health.xids] == [(1, 79, "hardware")]
    assert health.gpus[1].xids == [79]


async def test_an_injected_state_is_published_at_once(running):
    _, bus, broker = running
    assert (await ask(broker, injection(fault="throttle", gpu=0, throttle="hw_thermal"))).accepted
    health = await wait_for(bus, lambda h: h.trigger == "inject", timeout=1.0)
    assert health.verdict == "degraded" and health.gpus[0].throttle_reasons == ["hw_thermal"]


async def test_the_xid_stays_in_later_heartbeats_until_cleared():
    probe, _ = make_probe()
    probe.handle_injection(injection(fault="xid", code=48, gpu=0))
    probe.record_xids(probe.backend.wait_xids(0.5))  # what the watcher does
    assert (await probe.publish_once()).verdict == "failed"
    assert (await probe.publish_once()).verdict == "failed"
    assert probe.handle_injection(injection(fault="clear")).accepted
    assert (await probe.publish_once()).verdict == "healthy"


@pytest.mark.parametrize("data, words", [
    (b"{not json", "not a valid FaultInjection"),
    (dump(FaultInjection(cluster="c1", node="node3", fault="clear", requested_at=NOW)), "not c1/node3"),
    (dump(FaultInjection(cluster="c1", node="node2", fault="ecc", gpu=9, requested_at=NOW)), "GPU 9 does not exist"),
])
async def test_a_request_it_cannot_apply_is_refused_with_the_reason(running, data, words):
    _, _, broker = running
    ack = await ask(broker, data)
    assert not ack.accepted and words in ack.detail


async def test_it_answers_only_its_own_node(running):
    _, _, broker = running
    with pytest.raises(SubscriberNotFound):  # nobody subscribes to node3's subject: no responders
        await ask(broker, injection(fault="clear", node="node3"), node="node3")


class RealLikeBackend:
    """A backend without `inject`, as the NVML adapter."""

    backend = "nvml"

    def sample(self):
        return FakeNvml(8).sample()

    def wait_xids(self, timeout_s):
        return []

    def close(self):
        pass


def test_a_probe_on_real_gpus_refuses_injections():
    probe, _ = make_probe(RealLikeBackend())
    ack = probe.handle_injection(injection(fault="xid", code=79))
    assert not ack.accepted and "real GPUs" in ack.detail and ack.backend == "nvml"


async def test_a_bus_outage_does_not_stop_the_probe():
    probe, bus = make_probe()
    bus.down = True
    health = await probe.publish_once()
    assert health.verdict == "healthy" and bus.published == []


class BrokenBackend(RealLikeBackend):
    def sample(self) -> Sample:
        raise RuntimeError("driver went away")


async def test_a_sampling_bug_is_reported_in_the_heartbeat_not_silence():
    probe, _ = make_probe(BrokenBackend())
    health = await probe.publish_once()
    assert health.verdict == "degraded" and "driver went away" in health.reasons[0]
    assert probe.sampling_ok()
