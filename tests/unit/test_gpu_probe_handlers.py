"""The probe's shell with the bus in memory (FastStream's TestNatsBroker, tests/unit/memorybus.py):
what it publishes, when, and how its router answers injections."""

import asyncio
import contextlib
import datetime as dt

import pytest
from faststream.exceptions import SubscriberNotFound
from memorybus import Streams, memory_bus

from relaunch.common import subjects
from relaunch.common.schemas import FaultInjection, InjectionAck, NodeHealth, dump
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.domain.samples import Sample
from relaunch.gpu_probe.handlers import Probe, ProbeConfig
from relaunch.gpu_probe.router import router

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
CONFIG = ProbeConfig(cluster="c1", node="node2", expected_gpus=8, interval_s=30.0, event_wait_s=0.05)


@contextlib.asynccontextmanager
async def on_bus(backend=None):
    """A probe on a bus in memory, its router included: (probe, what reached the streams, the bus)."""
    probe = Probe(None, backend or FakeNvml(8), CONFIG, clock=lambda: NOW)
    async with memory_bus("gpu-probe-node2", router(probe)) as (bus, streams):
        probe.bus = bus
        yield probe, streams, bus


def injection(**kw) -> bytes:
    return dump(FaultInjection(**{"cluster": "c1", "node": "node2", "requested_at": NOW, **kw}))


async def wait_for(streams: Streams, predicate, timeout=2.0) -> NodeHealth:
    async with asyncio.timeout(timeout):
        while True:
            for health in streams.of(NodeHealth):
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
    async with on_bus() as (probe, streams, bus):
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(t) for t in probe.tasks(stop)]
        await wait_for(streams, lambda h: h.trigger == "start")
        yield probe, streams, bus.broker
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_publication_is_a_heartbeat_that_says_its_period():
    async with on_bus() as (probe, streams, _):
        health = await probe.publish_once()
        (published,) = streams.messages
        assert published.subject == subjects.signal_node("c1", "node2") and published.stream == subjects.SIGNALS.name
        assert published.body == health
        assert (health.verdict, health.trigger, health.seq, health.interval_s) == ("healthy", "interval", 1, 30.0)
        assert (health.gpu_count, health.expected_gpus, health.backend, health.at) == (8, 8, "fake", NOW)
        assert (await probe.publish_once()).seq == 2


async def test_an_injected_xid_is_published_at_once_as_failed(running):
    _, streams, broker = running
    answer = await ask(broker, injection(fault="xid", code=79, gpu=1))
    assert answer.accepted and answer.detail == "XID 79 on GPU 1"
    health = await wait_for(streams, lambda h: h.trigger == "xid", timeout=1.0)
    assert health.verdict == "failed" and any("XID 79" in r for r in health.reasons)
    assert [(x.gpu, x.code, x.xid_class) for x in health.xids] == [(1, 79, "hardware")]
    assert health.gpus[1].xids == [79]


async def test_an_injected_state_is_published_at_once(running):
    _, streams, broker = running
    assert (await ask(broker, injection(fault="throttle", gpu=0, throttle="hw_thermal"))).accepted
    health = await wait_for(streams, lambda h: h.trigger == "inject", timeout=1.0)
    assert health.verdict == "degraded" and health.gpus[0].throttle_reasons == ["hw_thermal"]


async def test_the_xid_stays_in_later_heartbeats_until_cleared():
    async with on_bus() as (probe, _, _):
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
    probe = Probe(None, RealLikeBackend(), CONFIG, clock=lambda: NOW)
    ack = probe.handle_injection(injection(fault="xid", code=79))
    assert not ack.accepted and "real GPUs" in ack.detail and ack.backend == "nvml"


async def test_a_bus_outage_does_not_stop_the_probe(monkeypatch):
    async with on_bus() as (probe, streams, bus):
        async def down(*args, **kwargs):
            raise ConnectionError("nats is down")

        monkeypatch.setattr(bus.broker, "publish", down)
        health = await probe.publish_once()
        assert health.verdict == "healthy" and streams.messages == []


class BrokenBackend(RealLikeBackend):
    def sample(self) -> Sample:
        raise RuntimeError("driver went away")


async def test_a_sampling_bug_is_reported_in_the_heartbeat_not_silence():
    async with on_bus(BrokenBackend()) as (probe, streams, _):
        health = await probe.publish_once()
        assert health.verdict == "degraded" and "driver went away" in health.reasons[0]
        assert streams.of(NodeHealth) == [health]
        assert probe.sampling_ok()
