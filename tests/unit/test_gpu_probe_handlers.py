"""The probe's shell with the bus in memory: what it publishes, when, and how it answers injections."""

import asyncio
import datetime as dt

import pytest

from relaunch.common import subjects
from relaunch.common.schemas import FaultInjection, InjectionAck, NodeHealth, dump
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.domain.samples import Sample
from relaunch.gpu_probe.handlers import Probe, ProbeConfig

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


class MemoryNats:
    def __init__(self) -> None:
        self.subscriptions: dict[str, object] = {}

    async def subscribe(self, subject, cb):
        self.subscriptions[subject] = cb
        nats = self

        class Sub:
            async def unsubscribe(self):
                nats.subscriptions.pop(subject, None)

        return Sub()

    async def flush(self):
        pass


class MemoryBus:
    def __init__(self) -> None:
        self.nc = MemoryNats()
        self.published: list[tuple[str, NodeHealth]] = []
        self.down = False

    async def publish(self, subject, model, msg_id=None):
        if self.down:
            raise ConnectionError("nats is down")
        self.published.append((subject, model))
        return True


class Msg:
    def __init__(self, data: bytes, reply: str = "_INBOX.1") -> None:
        self.data, self.reply, self.answer = data, reply, None

    async def respond(self, data: bytes) -> None:
        self.answer = InjectionAck.model_validate_json(data)


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


@pytest.fixture
async def running():
    """A probe whose tasks run, with a 30 s interval: any quick publication after the first is event-driven."""
    probe, bus = make_probe()
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(t) for t in probe.tasks(stop)]
    await wait_for(bus, lambda h: h.trigger == "start")
    await asyncio.wait_for(probe.injections_ready.wait(), 2)
    yield probe, bus
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
    _, bus = running
    msg = Msg(injection(fault="xid", code=79, gpu=1))
    await bus.nc.subscriptions[subjects.control_inject("c1", "node2")](msg)
    assert msg.answer.accepted and msg.answer.detail == "XID 79 on GPU 1"
    health = await wait_for(bus, lambda h: h.trigger == "xid", timeout=1.0)
    assert health.verdict == "failed" and any("XID 79" in r for r in health.reasons)
    assert [(x.gpu, x.code, x.xid_class) for x in health.xids] == [(1, 79, "hardware")]
    assert health.gpus[1].xids == [79]


async def test_an_injected_state_is_published_at_once(running):
    _, bus = running
    msg = Msg(injection(fault="throttle", gpu=0, throttle="hw_thermal"))
    await bus.nc.subscriptions[subjects.control_inject("c1", "node2")](msg)
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
def test_a_request_it_cannot_apply_is_refused_with_the_reason(data, words):
    probe, _ = make_probe()
    ack = probe.handle_injection(data)
    assert not ack.accepted and words in ack.detail


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
