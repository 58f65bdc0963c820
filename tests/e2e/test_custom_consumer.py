"""docs/custom-consumer.md's programs, verbatim, against the test stack (issue 39): each `# file:` block
of the page is written out as it stands and run as the declared consumer `advice-webhook` (scripts/stack.sh
declares it; its settings are $RUN/consumers/advice-webhook.env).

- a crashed job's Advice reaches a local webhook receiver;
- the FastStream program killed after the webhook answered and before its ack gets that Advice again
  (a duplicate, never a loss), and the page's idempotency key makes the receiver count it once;
- stopped, while another job's Advice is issued, the consumer restarted a minute later (the page's nats-py
  twin, on the same durable) resumes where it was: the new Advice, not the old one again;
- NATS refuses the consumer's user a subscription or a publish outside its declaration.

The programs' output and the receiver's record go to test-artifacts/custom-consumer.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js.api import ConsumerConfig
from page_programs import programs as page_programs
from page_programs import write as write_page_programs
from slurmjobs import sbatch, wait_until
from webhook_receiver import Receiver

from relaunch.common import natsauth, subjects

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=116)]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
USER = "advice-webhook"
RESTART_AFTER_S = 60.0
"""How long the consumer stays away before it is started again (the issue's "a minute later")."""


def env_file(path: Path) -> dict[str, str]:
    """The variables a `source`d env file of scripts/stack.sh exports (PATH left out)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            out[key] = value
    out.pop("PATH", None)
    return out


class Program:
    """One of the page's programs, running, its output (stdout and stderr) in a file."""

    def __init__(self, folder: Path, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.log = folder / f"{name}.{time.monotonic_ns()}.out"
        self.proc = subprocess.Popen([sys.executable, str(folder / name)], cwd=folder, env=env,
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, as an operator stops it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"{self.name} did not stop on SIGTERM within 20 s:\n{self.output()[-3000:]}")


@pytest.fixture
def folder(tmp_path) -> Path:
    write_page_programs(tmp_path)
    return tmp_path


def test_the_page_declares_its_programs():
    assert {"advice_webhook.py", "advice_webhook_nats.py", "watch_events.py"} <= set(page_programs())


def drain_backlog(start, consumer_env: dict[str, str], quiet_s: float = 5.0) -> int:
    """Runs the page's program on the declared durable until it has posted nothing for quiet_s; the posts it
    made (the Advice of earlier tests) go to a receiver of their own. Returns how many it took."""
    sink = Receiver().up()
    try:
        drainer = start("advice_webhook.py", {**consumer_env, "WEBHOOK_URL": sink.url})
        wait_until("the FastStream consumer to start (draining)", lambda: "started successfully" in drainer.output()
                   or drainer.proc.poll() is not None, timeout=60)
        assert drainer.proc.poll() is None, drainer.output()
        seen, since = -1, time.monotonic()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if len(sink.posts) != seen:
                seen, since = len(sink.posts), time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"the durable's backlog was still flowing after 120 s ({len(sink.posts)} posts)")
        assert drainer.stop() == 0, drainer.output()[-2000:]
        return len(sink.posts)
    finally:
        sink.down()


def test_the_pages_programs_deliver_every_advice_once_across_a_kill_and_a_restart(services, folder):
    run = Path(services["RELAUNCH_RUN_DIR"])
    consumer_env = {**os.environ, **env_file(run / "consumers" / f"{USER}.env")}
    assert consumer_env["RELAUNCH_NATS_USER"] == USER and Path(consumer_env["RELAUNCH_NATS_PASSWORD_FILE"]).is_file()
    receiver = Receiver().up()
    consumer_env["WEBHOOK_URL"] = receiver.url
    # The live view runs as `source .run/env` makes it: the shared cli user.
    cli_env = {**os.environ, **env_file(run / "env")}
    record: dict = {"programs": {}, "receiver": []}
    programs: list[Program] = []

    def start(name: str, env: dict[str, str]) -> Program:
        programs.append(Program(folder, name, env))
        return programs[-1]

    try:
        # The declared durable exists since the stack's start, so it holds every Advice the tests before this
        # one caused (a durable's point: nothing is lost while no program runs). The page's program takes
        # that backlog first; this test's own posts are counted from an empty durable.
        drain_backlog(start, consumer_env)
        watch = start("watch_events.py", cli_env)
        first = start("advice_webhook.py", consumer_env)
        wait_until("the FastStream consumer to start", lambda: "started successfully" in first.output()
                   or first.proc.poll() is not None, timeout=60)
        assert first.proc.poll() is None, first.output()
        # Kill it after the webhook answered and before its ack: stopped (SIGSTOP) as the receiver takes
        # the first post, before the answer leaves; killed once that answer is on its way.
        def stop_the_first_program(body: dict) -> None:
            receiver.on_post = None
            os.kill(first.proc.pid, signal.SIGSTOP)

        receiver.on_post = stop_the_first_program
        job_a = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=2", STEP_SECONDS="0.2")
        key_a = f"{services['RELAUNCH_CLUSTER']}.{job_a}.1"
        wait_until("the first Advice at the receiver", lambda: [p for p in receiver.posts if p["key"] == key_a],
                   timeout=120)
        time.sleep(0.5)  # the 200 is written to the stopped program's socket
        first.proc.kill()
        first.proc.wait(10)
        assert "sent" not in first.output(), "the killed program acked before it was killed"

        again = start("advice_webhook.py", consumer_env)
        # The unacked Advice comes again once the declared ack_wait (30 s) has passed.
        wait_until("the Advice again (a duplicate, not a loss)",
                   lambda: sum(p["key"] == key_a for p in receiver.posts) >= 2, timeout=90)
        wait_until("the restarted program to ack it", lambda: f"sent {key_a} (delivery 2)" in again.output(), 15)
        assert again.stop() == 0
        stopped_at = time.monotonic()

        # While no consumer runs, another job's Advice is issued (and carried out).
        job_b = sbatch(services, "flaky-train.sh", "relaunch:max_attempts=2", STEP_SECONDS="0.2")
        key_b = f"{services['RELAUNCH_CLUSTER']}.{job_b}.1"
        wait_until("job B's restart, seen live", lambda: f"job {job_b}: advice generation 1 CONVERGED"
                   in watch.output(), timeout=120)
        assert not [p for p in receiver.posts if p["key"] == key_b]
        # A minute later, the page's nats-py twin on the same durable carries on where the FastStream one stopped.
        time.sleep(max(0.0, stopped_at + RESTART_AFTER_S - time.monotonic()))
        later = start("advice_webhook_nats.py", consumer_env)
        wait_until("job B's Advice after the restart", lambda: f"sent {key_b} (delivery 1)" in later.output(),
                   timeout=60)
        time.sleep(3)  # and nothing older comes again
        assert later.stop() == 0

        counted = Counter(p["key"] for p in receiver.posts)
        assert counted == {key_a: 2, key_b: 1}, counted  # two posts of A: one decision, by its key
        assert len(counted) == 2
        assert f"job {job_a}: crash" in watch.output(), watch.output()[-2000:]
        record["receiver"] = [{"key": p["key"], "text": p["body"].get("text", ""), "at": p["at"]}
                              for p in receiver.posts]
        record["counted_once"] = sorted(counted)
    finally:
        for program in programs:
            if program.proc.poll() is None:
                program.proc.kill()
                program.proc.wait(5)
            record["programs"].setdefault(program.name, []).append(program.output())
        receiver.down()
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "custom-consumer.json").write_text(json.dumps(record, indent=2))


async def _refusals(url: str, password: str) -> dict[str, bool]:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await nats.connect(url.split(","), user=USER, password=password, inbox_prefix=natsauth.inbox_prefix(USER),
                            error_cb=on_error, allow_reconnect=False)
    js = nc.jetstream(timeout=2)

    async def violation(verb: str, subject: str) -> bool:
        wanted = f'permissions violation for {verb} to "{subject}"'.lower()
        for _ in range(100):
            if any(wanted in e for e in errors):
                return True
            await asyncio.sleep(0.02)
        return False

    async def js_refused(call) -> bool:
        try:
            await call
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, TimeoutError):
            return True  # the request never reached the JetStream API
        return False

    advice = subjects.advice("reltest", "1")
    out = {}
    await nc.subscribe(subjects.ALL_ADVICE)  # a core subscription beside its durable
    out["subscribe relaunch.advice.>"] = await violation("subscription", subjects.ALL_ADVICE)
    await nc.subscribe("_INBOX.>")  # NATS' shared inbox: others' replies
    out["subscribe _INBOX.>"] = await violation("subscription", "_INBOX.>")
    await nc.publish(advice, b"{}")
    out[f"publish {advice}"] = await violation("publish", advice)
    actuator = subjects.ACTUATOR_ADVICE.durable
    out["info actuator-advice"] = await js_refused(js.consumer_info(subjects.ADVICE.name, actuator))
    pull = await js.pull_subscribe_bind(actuator, stream=subjects.ADVICE.name,
                                        inbox_prefix=f"{natsauth.inbox_prefix(USER)}.".encode())
    await js_refused(pull.fetch(1, timeout=1))
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{subjects.ADVICE.name}.{actuator}"
    out["pull actuator-advice"] = await violation("publish", next_subject)
    out["create a consumer"] = await js_refused(js.add_consumer(subjects.ADVICE.name, ConsumerConfig(
        name="wider", durable_name="wider", filter_subject=subjects.ALL_ADVICE)))
    out["change its own durable"] = await js_refused(js.add_consumer(subjects.ADVICE.name, ConsumerConfig(
        name=USER, durable_name=USER, filter_subject=subjects.ALL_ADVICE)))
    await nc.close()
    return out


def test_nats_refuses_the_declared_consumer_anything_outside_its_declaration(services):
    run = Path(services["RELAUNCH_RUN_DIR"])
    settings = env_file(run / "consumers" / f"{USER}.env")
    refused = asyncio.run(_refusals(settings["RELAUNCH_NATS_URL"],
                                    natsauth.read_password(settings["RELAUNCH_NATS_PASSWORD_FILE"])))
    assert all(refused.values()), refused
