"""relaunch.client's reporter says once on stderr (the job's log) when its reports do not reach the
bus: a wrong host, user or password would otherwise drop every report in silence (issue 40)."""

from __future__ import annotations

import time

from relaunch.client.progress import ProgressReporter


def test_an_unreachable_bus_is_said_once_on_stderr_without_the_password(capsys):
    reporter = ProgressReporter("nats://alice:s3cret@127.0.0.1:1", "c", "7", key="k" * 32)
    for step in range(3):
        reporter.report(step)
    deadline = time.monotonic() + 30
    while reporter.dropped < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    reporter.close(1)
    err = capsys.readouterr().err
    assert reporter.dropped == 3 and reporter.sent == 0
    assert err.count("progress reports do not reach relaunch") == 1, err
    assert "nats://127.0.0.1:1" in err and "s3cret" not in err and "RELAUNCH_NATS_URL" in err


async def test_a_refused_user_or_publish_is_said_once():
    reporter = ProgressReporter("nats://127.0.0.1:1", "c", "7", key="k" * 32)
    try:
        await reporter._on_error(Exception("nats: 'Permissions Violation for Publish to \"relaunch.x\"'"))
        await reporter._on_error(Exception("nats: 'Authorization Violation'"))
        await reporter._on_error(ConnectionResetError("a transient disconnect: retried, not said"))
    finally:
        reporter.close(0.1)
    assert reporter._warned
