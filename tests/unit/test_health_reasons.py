"""/healthz says why a service is not ready (relaunch.common.health): a check may give its reason with its
result; one that raises is failed with what it raised; /healthz's body keeps `checks` as before (additive)."""

from __future__ import annotations

import asyncio
import json

from relaunch.common.health import HealthServer


def test_a_failing_check_gives_its_reason_and_a_passing_one_none():
    server = HealthServer("actuator", {"nats": lambda: True,
                                       "slurm": lambda: (False, "slurmctld has not answered (cli adapter) for 40 s"),
                                       "redis": lambda: 1 / 0})
    ok, results, reasons = server.report_with_reasons()
    assert not ok and results == {"nats": True, "slurm": False, "redis": False}
    assert reasons["slurm"] == "slurmctld has not answered (cli adapter) for 40 s"
    assert reasons["redis"].startswith("the check raised ZeroDivisionError") and "nats" not in reasons
    assert server.report() == (False, results)


def test_healthz_answers_503_with_the_reasons():
    async def scenario() -> tuple[str, dict]:
        server = HealthServer("actuator", {"slurm": lambda: (False, "no answer")})
        port = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        data = await reader.read()
        writer.close()
        await server.close()
        head, _, body = data.decode().partition("\r\n\r\n")
        return head.splitlines()[0], json.loads(body)

    status, body = asyncio.run(scenario())
    assert status == "HTTP/1.1 503 Service Unavailable"
    assert body == {"service": "actuator", "ok": False, "checks": {"slurm": False}, "reasons": {"slurm": "no answer"}}


def test_the_actuator_is_ready_only_while_slurm_answered_lately():
    from relaunch.common.health import answered_within
    assert answered_within(100.0, 110.0, 15.0, "slurmctld (through the cli adapter)")[0]
    ok, why = answered_within(100.0, 140.0, 15.0, "slurmctld (through the cli adapter)")
    assert not ok and why == "slurmctld (through the cli adapter) has not answered for 40 s (more than 15 s)"


def test_the_detector_is_ready_only_while_its_log_roots_can_be_read(tmp_path):
    from relaunch.common.health import readable_dirs
    assert readable_dirs([str(tmp_path)], "RELAUNCH_DETECTOR_LOG_ROOTS")[0]
    assert readable_dirs([], "RELAUNCH_DETECTOR_LOG_ROOTS")[0]  # none configured: nothing to read
    missing = str(tmp_path / "not-mounted")
    ok, why = readable_dirs([str(tmp_path), missing], "RELAUNCH_DETECTOR_LOG_ROOTS")
    assert not ok and why == f"not readable by this service: {missing} (RELAUNCH_DETECTOR_LOG_ROOTS)"
