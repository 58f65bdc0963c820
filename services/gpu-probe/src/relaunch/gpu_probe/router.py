"""gpu-probe's FastStream router: the inject request/reply it answers for its own node (declared in
relaunch.common.consumers as PROBE_INJECT) and the NodeHealth it publishes (relaunch.gpu_probe.handlers)."""

from __future__ import annotations

from faststream.nats import JStream, NatsRouter

from relaunch.common import consumers, subjects
from relaunch.common.schemas import NodeHealth
from relaunch.common.serving import answer

from .handlers import Probe


def router(probe: Probe | None = None) -> NatsRouter:
    """The probe's router; without a probe, the declaration alone (templated subjects, for AsyncAPI)."""
    r = NatsRouter()
    if probe is None:
        answer(r, consumers.PROBE_INJECT)
    else:
        answer(r, consumers.PROBE_INJECT, probe.answer_injection, cluster=probe.config.cluster,
               node=probe.config.node)
    r.publisher(subjects.signal_node("{cluster}", "{node}"), stream=JStream(subjects.SIGNALS.name, declare=False),
                schema=NodeHealth, title="node-health",
                description="NodeHealth every interval (the probe's heartbeat) and at once on an XID or injection.")
    return r
