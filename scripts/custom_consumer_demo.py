"""docs/custom-consumer.md's FastStream program (`advice_webhook.py`), verbatim, against a running stack
until one job's Advice has reached a local webhook receiver and been acked: the compose demo's phase
"custom consumer" (scripts/compose-demo.sh, `make demo-compose`; issue 39).

    RELAUNCH_NATS_URL=nats://127.0.0.1:28422 .venv/bin/python scripts/custom_consumer_demo.py --cluster demo --job 1

The program is taken from the page as it stands (tests/page_programs.py, as the end-to-end tier takes it)
and run as the page says, with WEBHOOK_URL pointing at a receiver on a free loopback port
(tests/webhook_receiver.py). Where it connects, and as whom, comes from the RELAUNCH_NATS_* settings in
this script's environment, which the program inherits: the compose demo's NATS has no users, so there
RELAUNCH_NATS_URL alone; on `make up`, `source .run/consumers/advice-webhook.env` first.

The durable was made (by the stack's NATS setup) before the job was submitted, so the Advice is waiting
on it however late the program starts. Prints the program's output and the receiver's record; exits 0
when the job's Advice reached the receiver and the program acked it, 1 when not within --timeout
seconds, saying what it waited for and what it saw last.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from page_programs import write as write_page_programs  # noqa: E402
from webhook_receiver import Receiver  # noqa: E402

PROGRAM = "advice_webhook.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
"""FastStream colours its log lines even into a file: shown here without the colour codes."""
STOP_WAIT_S = 20.0
"""How long the program may take to stop on SIGTERM (it finishes the Advice in hand first)."""


def indented(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.rstrip("\n").splitlines()) or prefix + "(nothing)"


def record(posts: list[dict]) -> str:
    """The receiver's posts, one line each: the Idempotency-Key header and the text the program sent."""
    return "\n".join(f"{p['key']}: {p['body'].get('text', '')}" for p in posts) or "(no post)"


def run(cluster: str, job: str, timeout: float) -> int:
    folder = Path(tempfile.mkdtemp(prefix="custom-consumer-"))
    program = write_page_programs(folder)[PROGRAM]
    receiver = Receiver().up()
    log = folder / f"{PROGRAM}.out"
    proc = subprocess.Popen([sys.executable, str(program)], cwd=folder, env={**os.environ, "WEBHOOK_URL": receiver.url},
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    wanted = f"{cluster}.{job}."  # the page's key: <cluster>.<job_id>.<generation>
    print(f"Running docs/custom-consumer.md's {PROGRAM} (as printed) against {os.environ.get('RELAUNCH_NATS_URL')}"
          f", WEBHOOK_URL={receiver.url}: waiting up to {timeout:.0f} s for job {job}'s Advice.", flush=True)
    t0 = time.monotonic()
    acked = None
    try:
        while time.monotonic() - t0 < timeout and proc.poll() is None:
            keys = [p["key"] for p in receiver.posts if (p["key"] or "").startswith(wanted)]
            output = log.read_text(errors="replace")
            acked = next((k for k in keys if f": sent {k} (delivery" in output), None)
            if acked:
                break
            time.sleep(0.25)
        waited = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # as an operator stops it
        try:
            rc = proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(5)
        receiver.down()
    output = ANSI.sub("", log.read_text(errors="replace"))
    print(f"The program's output (exit {rc} on SIGTERM):\n{indented(output)}")
    print(f"The receiver's record (Idempotency-Key: text):\n{indented(record(receiver.posts))}", flush=True)
    if acked is None:
        ended = f"the program exited ({rc}) after {waited:.1f} s" if waited < timeout else f"{timeout:.0f} s passed"
        print(f"custom consumer: FAILED: waited for job {job}'s Advice (Idempotency-Key {wanted}<generation>) at the "
              f"receiver and the program's 'sent' for it; {ended}. Saw last: {len(receiver.posts)} post(s) "
              f"{[p['key'] for p in receiver.posts]}, the program's last line: "
              f"{(output.strip().splitlines() or ['(none)'])[-1]!r}", file=sys.stderr)
        return 1
    if rc != 0:
        print(f"custom consumer: FAILED: the program exited {rc} on SIGTERM (the page says it stops cleanly)",
              file=sys.stderr)
        return 1
    print(f"Job {job}'s Advice ({acked}) reached the webhook in {waited:.1f} s and was acked.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", required=True, help="the stack's RELAUNCH_CLUSTER (compose: demo)")
    parser.add_argument("--job", required=True, help="the Slurm job whose Advice must arrive")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it (default 60)")
    args = parser.parse_args(argv)
    return run(args.cluster, args.job, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
