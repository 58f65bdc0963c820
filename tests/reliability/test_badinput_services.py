"""Bad input into the running services (scripts/stack.sh): malformed, wrong-version, unknown-field and
wrong-type bodies on the detector's, decider's and actuator's subjects each land in that service's DLQ
with the reason and move its dead-letter counter; the services stay healthy and process the valid
message sent after them (their durable consumer acks it)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import urllib.request

import pytest

from relaunch.common import subjects
from relaunch.common.connection import Bus
from relaunch.common.schemas import Advice, AuditEntry, DeadLetter, LogBatch, dump

pytestmark = pytest.mark.reliability

BASE = int(os.environ.get("RELAUNCH_TEST_PORT_BASE", "24000"))  # offsets as in scripts/stack.sh
HEALTH = {"detector": BASE + 91, "decider": BASE + 92, "actuator": BASE + 93}
NOW = dt.datetime.now(dt.UTC)


def bad_versions(valid: bytes) -> list[bytes]:
    body = json.loads(valid)
    return [b"\xff\xfe not json {", json.dumps({**body, "schema": body["schema"].replace("/v1", "/v9")}).encode(),
            json.dumps({**body, "surprise": 1}).encode(), json.dumps({**body, "job_id": ["1"]}).encode()]


def dead_letters(service: str, consumer: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{HEALTH[service]}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    pattern = rf'relaunch_dead_letters_total\{{[^}}]*consumer="{re.escape(consumer)}"[^}}]*\}} ([0-9.e+]+)'
    return sum(float(m) for m in re.findall(pattern, text))


async def acked_past(bus: Bus, spec: subjects.ConsumerSpec, seq: int, timeout: float = 30) -> bool:
    end = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < end:
        info = await bus.js.consumer_info(spec.stream.name, spec.durable)
        if info.ack_floor.stream_seq >= seq:
            return True
        await asyncio.sleep(0.2)
    return False


async def dlq_reasons(bus: Bus, service: str, subject: str, count: int) -> list[str]:
    sub = await bus.js.subscribe(subjects.dlq(service), stream=subjects.DLQ.name, ordered_consumer=True)
    reasons: list[str] = []
    try:
        while len(reasons) < count:
            letter = DeadLetter.model_validate_json((await sub.next_msg(timeout=30)).data)
            if letter.subject == subject:
                reasons.append(letter.reason)
    finally:
        await sub.unsubscribe()
    return reasons


async def test_running_services_dead_letter_bad_input_and_keep_processing(services, unique):
    cluster = f"c{unique}"
    bus = await Bus.connect(services["RELAUNCH_NATS_URL"], f"t{unique}")
    cases = [
        ("detector", subjects.DETECTOR_LOGS, subjects.signal_log(cluster, "31"),
         dump(LogBatch(cluster=cluster, job_id="31", attempt=0, path="/nowhere", offset=0, lines=["ok"], read_at=NOW))),
        ("decider", subjects.DECIDER_AUDIT, subjects.event_audit(cluster, "31"),
         dump(AuditEntry(cluster=cluster, job_id="31", service="test", action="noted", idempotency_key=f"k{unique}",
                         at=NOW))),
        # The actuator gets only the bad ones: a valid Advice would make it act on Slurm.
        ("actuator", subjects.ACTUATOR_ADVICE, subjects.advice(cluster, "31"), None),
    ]
    advice = dump(Advice(cluster=cluster, job_id="31", attempt=0, generation=1, operation="restart", reason="t",
                         issued_at=NOW, expires_at=NOW))
    try:
        for service, spec, subject, valid in cases:
            before = dead_letters(service, spec.durable)
            bad = bad_versions(valid or advice)
            for body in bad:
                await bus.js.publish(subject, body)
            reasons = await dlq_reasons(bus, service, subject, len(bad))
            assert all(r.startswith("not a valid ") for r in reasons), reasons
            assert any("Invalid JSON" in r for r in reasons) and any("surprise" in r for r in reasons), reasons
            for _ in range(50):
                if dead_letters(service, spec.durable) - before >= len(bad):
                    break
                await asyncio.sleep(0.1)
            assert dead_letters(service, spec.durable) - before == len(bad), service
            if valid is not None:
                ack = await bus.js.publish(subject, valid)
                assert await acked_past(bus, spec, ack.seq), f"{service} processed the valid message after the bad ones"
            with urllib.request.urlopen(f"http://127.0.0.1:{HEALTH[service]}/healthz", timeout=5) as resp:
                assert resp.status == 200, service
    finally:
        await bus.close()
