"""`relaunch inject` against a probe running in-process with the fake backend, over the test stack's NATS
(with its NATS users and permissions): an injected XID 79, sent as the operator identity, is published at
once as a failed NodeHealth that names it; the shared `cli` user, which every training process holds,
is refused by NATS and the probe hears nothing (issue 35, docs/security.md "Who may inject")."""

import asyncio
from pathlib import Path

import nats
import pytest

from relaunch.client import inject
from relaunch.common import subjects
from relaunch.common.connection import Bus, connect_options
from relaunch.common.schemas import NodeHealth
from relaunch.gpu_probe.adapters.fake_nvml import FakeNvml
from relaunch.gpu_probe.handlers import Probe, ProbeConfig
from relaunch.gpu_probe.router import router

pytestmark = pytest.mark.integration

INTERVAL_S = 60.0
"""Long on purpose: a publication within a couple of seconds can only be the XID's, not a heartbeat."""


async def next_health(queue: asyncio.Queue, predicate, timeout: float) -> NodeHealth:
    async with asyncio.timeout(timeout):
        while True:
            health = await queue.get()
            if predicate(health):
                return health


async def test_an_injected_xid_79_is_published_at_once_as_failed(test_stack, unique, monkeypatch):
    url = test_stack["RELAUNCH_NATS_URL"]
    creds = Path(test_stack["RELAUNCH_NATS_PASSWORD_FILE"]).parent
    # As the local stack's .run/env has it: injections go as the operator user.
    assert test_stack["RELAUNCH_INJECT_NATS_PASSWORD_FILE"] == str(creds / "operator.pass")
    cluster, node = f"c{unique}", "node2"
    bus = await Bus.connect(url, f"probe-{unique}")
    probe = Probe(bus, FakeNvml(8), ProbeConfig(cluster=cluster, node=node, expected_gpus=8, interval_s=INTERVAL_S,
                                                 event_wait_s=0.2))
    listener = await nats.connect(url, **connect_options())
    seen: asyncio.Queue[NodeHealth] = asyncio.Queue()

    async def on_health(msg) -> None:
        seen.put_nowait(NodeHealth.model_validate_json(msg.data))

    await listener.subscribe(subjects.signal_node(cluster, node), cb=on_health)
    await listener.flush()
    await bus.serve(router(probe))  # as main does: this node's inject requests are answered from here on
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(t) for t in probe.tasks(stop)]
    try:
        first = await next_health(seen, lambda h: h.trigger == "start", timeout=10)
        assert first.verdict == "healthy" and first.interval_s == INTERVAL_S

        loop = asyncio.get_running_loop()
        t0 = loop.time()
        code, message = await inject.send("xid", node, code=79, gpu=1, cluster=cluster, nats_url=url, timeout_s=3)
        assert code == inject.EXIT_OK, message
        health = await next_health(seen, lambda h: h.trigger == "xid", timeout=3)
        assert loop.time() - t0 < 3, "published at once, not at the next heartbeat"
        assert health.verdict == "failed" and health.cluster == cluster and health.node == node
        assert any("XID 79" in reason for reason in health.reasons)
        assert [(x.gpu, x.code, x.xid_class) for x in health.xids] == [(1, 79, "hardware")]

        code, message = await inject.send("clear", "node9", cluster=cluster, nats_url=url, timeout_s=0.5)
        assert code == inject.EXIT_NO_PROBE, "no probe runs for node9"

        # The shared cli user (training code holds it): NATS refuses the request, the probe never hears it.
        monkeypatch.delenv("RELAUNCH_INJECT_NATS_PASSWORD_FILE")
        monkeypatch.setenv("RELAUNCH_NATS_USER", "cli")
        monkeypatch.setenv("RELAUNCH_NATS_PASSWORD_FILE", str(creds / "cli.pass"))
        code, message = await inject.send("xid", node, code=48, gpu=2, cluster=cluster, nats_url=url, timeout_s=1)
        assert code == inject.EXIT_USAGE and "only the operator identity may inject" in message, message
        with pytest.raises(TimeoutError):
            await next_health(seen, lambda h: any(x.code == 48 for x in h.xids), timeout=1.5)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listener.close()
        await bus.close()
