"""What the attacking tests share: submitting jobs as an unprivileged user (nobody), planting canaries
(root-only files holding a secret string) and looking for them everywhere relaunch could have put what it
read (every message on the bus, the DLQ stream, the API with and without its token, the ledger through
`relaunch jobs show --json`, the services' logs), and reading the scheduler's, the ledger's and the
detector's view of a job.

Job states are read from `squeue --json` (never `scontrol show job -o`, whose text a crafted job name can
shadow: tests/security/test_job_names.py)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
from slurmjobs import wait_until

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
JOBS = Path(__file__).resolve().parent / "jobs"
"""The attacks' job scripts (sbatch reads a script as the submitter and ships its text: the user the job runs
as needs no access to this folder)."""
SLURM_WAIT_S = 90.0
"""How long a test waits for Slurm and the services (a loaded 2-core machine runs several suites at once)."""


def run_dir(env: dict) -> Path:
    return Path(env["RELAUNCH_RUN_DIR"])


def new_canary() -> str:
    """A secret no test writes anywhere but into a root-only file (letters and digits only: JSON, the
    terminal and URL encodings leave it as it is)."""
    return "CANARY" + uuid.uuid4().hex.upper()


def plant(path: Path, canary: str, line: str = "Segmentation fault (core dumped)", lines: int = 200) -> Path:
    """A root-only (0600) file of `lines` lines holding the canary and a failure line: relaunch restarting the
    job on this line, or quoting it, would be reading the file. Many lines, so that whatever offset a
    follower had reached in the file that was there before, it would still find the canary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{canary} {line}\n" for _ in range(lines))
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)
    return path


# -- unprivileged users ---------------------------------------------------------------------------------
NOBODY = "nobody"


def nobody_ids() -> tuple[int, int]:
    entry = pwd.getpwnam(NOBODY)
    return entry.pw_uid, entry.pw_gid


def nobody_dir(env: dict, tag: str) -> Path:
    """A working and output directory of nobody's own ($RUN/jobs/nobody-<tag>, 0755), inside the stack's
    allowed log roots."""
    folder = run_dir(env) / "jobs" / f"nobody-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    uid, gid = nobody_ids()
    os.chown(folder, uid, gid)
    os.chmod(folder, 0o755)
    for parent in (folder.parent, *folder.parent.parents):  # nobody must reach it (a+x on the way)
        if parent.stat().st_mode & 0o001 == 0:
            raise AssertionError(f"{parent} is not searchable by other users: nobody's jobs cannot run there")
    return folder


def submit(env: dict, script: str, comment: str, *args: str, user: str | None = None, workdir: Path | None = None,
           output: str | None = None, name: str | None = None, **job_env: str) -> str:
    """sbatch tests/security/jobs/<script> (or examples/<script>) as root, or as `user` (--uid/--gid: slurmd runs
    it as that user). `output` defaults to <workdir or $RUN/jobs>/%x-%j.out."""
    path = JOBS / script if (JOBS / script).exists() else REPO / "examples" / script
    folder = workdir or run_dir(env) / "jobs"
    argv = ["sbatch", "--parsable", f"--comment={comment}", "--open-mode=append",
            "-o", output or str(folder / "%x-%j.out"), "-D", str(folder)]
    if user:
        uid, gid = pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid
        argv += [f"--uid={uid}", f"--gid={gid}"]
    if name is not None:
        argv.append(f"--job-name={name}")
    out = subprocess.run([*argv, *args, str(path)], check=True, capture_output=True, text=True, timeout=60,
                         env={**os.environ, **job_env})
    return out.stdout.strip().split(";")[0]


def squeue_job(job_id: str) -> dict:
    """The job's object in `squeue --json --states=all`, with `state` (the base state) and `restarts` added;
    {} when the controller no longer knows it. (22.05's squeue --json ignores --jobs: picked by id.)"""
    out = subprocess.run(["squeue", "--json", "--states=all", f"--jobs={job_id}"], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        return {}
    for job in json.loads(out.stdout).get("jobs", []):
        if str(job.get("job_id")) == job_id:
            state = job.get("job_state")
            job["state"] = state[0] if isinstance(state, list) and state else state
            job["restarts"] = int(job.get("restart_cnt") or 0)
            return job
    return {}


def wait_state(job_id: str, states: tuple[str, ...], timeout: float = SLURM_WAIT_S, restarts: int | None = None
               ) -> dict:
    """Until the job is in one of `states` (and has `restarts` restarts, when given)."""
    return wait_until(f"job {job_id} in {states}" + (f" with {restarts} restarts" if restarts is not None else ""),
                      lambda: (j := squeue_job(job_id)) and j["state"] in states
                      and (restarts is None or j["restarts"] == restarts) and j, timeout)


def sacct_states(job_id: str) -> list[str]:
    """Every attempt's state in accounting (sacct -D), oldest first."""
    out = subprocess.run(["sacct", "-X", "-D", "-n", "-P", "-j", job_id, "--format=State"], capture_output=True,
                         text=True, timeout=60)
    return [line.split()[0] for line in out.stdout.split("\n") if line.strip()]


def cancel(*job_ids: str) -> None:
    subprocess.run(["scancel", *job_ids], capture_output=True, timeout=60)


# -- what relaunch says -----------------------------------------------------------------------------------
def token(env: dict) -> str:
    return (run_dir(env) / "api-token").read_text().strip()


def show(env: dict, job_id: str) -> dict:
    """`relaunch jobs show JOBID --json` (contract) with the API token, so evidence lines are included; {}
    before the ledger knows the job."""
    out = subprocess.run([str(VENV_BIN / "relaunch"), "jobs", "show", job_id, "--json"], capture_output=True,
                         text=True, timeout=60,
                         env={**os.environ, "RELAUNCH_API_TOKEN_FILE": str(run_dir(env) / "api-token")})
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout) if out.returncode == 0 else {}


def wait_ledger(env: dict, job_id: str, what: str, predicate, timeout: float = SLURM_WAIT_S) -> dict:
    """Until `predicate(record)` holds for the job's `relaunch jobs show --json` record."""
    return wait_until(f"job {job_id}: {what}", lambda: (r := show(env, job_id)) and predicate(r) and r, timeout)


def audit(record: dict, action: str) -> list[dict]:
    return [a for a in record.get("audit", []) if a["action"] == action]


def forget(env: dict, *nodes: str) -> None:
    """The operator's `relaunch nodes clear NODE` (the API's route): the history and readings earlier tests of
    the session left these nodes stop counting. (404: the ledger never heard of the node.)"""
    with httpx.Client(base_url=env["RELAUNCH_API_URL"], timeout=30,
                      headers={"Authorization": f"Bearer {token(env)}"}) as client:
        for node in nodes:
            answer = client.post(f"/v1/nodes/{env['RELAUNCH_CLUSTER']}/{node}/clear",
                                 json={"reason": "tests/security: start without history", "actor": "test"})
            assert answer.status_code in (201, 404), answer.text


def relaunch(env: dict, *args: str, timeout: float = 60, **extra_env: str) -> subprocess.CompletedProcess:
    """The relaunch CLI, its output captured as bytes."""
    return subprocess.run([str(VENV_BIN / "relaunch"), *args], capture_output=True, timeout=timeout,
                          env={**os.environ, **env, "COLUMNS": "400", **extra_env})


def metric(env: dict, service_port_offset: int, name: str, labels: str = "") -> float:
    """One sample of a service's /metrics (PORT_BASE + offset: detector 91), 0 when absent."""
    url = f"http://127.0.0.1:{int(env['RELAUNCH_PORT_BASE']) + service_port_offset}/metrics"
    text = httpx.get(url, timeout=10).text
    wanted = re.compile(rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} ([0-9.e+-]+)$",
                        re.M)
    found = wanted.search(text)
    return float(found.group(1)) if found else 0.0


DETECTOR = 91


def api_answers(env: dict, job_ids: list[str]) -> dict[str, bytes]:
    """The API's answers about these jobs and the fleet, each with and without the bearer token."""
    base, cluster = env["RELAUNCH_API_URL"], env["RELAUNCH_CLUSTER"]
    paths = ["/v1/jobs?limit=500", "/v1/advice?limit=500", "/v1/nodes", "/v1/fleet", "/"]
    for job in job_ids:
        paths += [f"/v1/jobs/{cluster}/{job}", f"/v1/jobs/{cluster}/{job}/progress"]
    answers = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        for path in paths:
            for label, headers in (("", {}), (" (token)", {"Authorization": f"Bearer {token(env)}"})):
                answer = client.get(path, headers=headers)
                # (a job's progress picture may not exist: no progress was ever reported)
                assert answer.status_code == 200 or path.endswith("/progress"), (path, answer.status_code)
                answers[path + label] = answer.content
    return answers


# -- the bus ----------------------------------------------------------------------------------------------
async def _admin_connection(env: dict):
    import nats

    from relaunch.common.natsauth import ADMIN, read_password

    return await nats.connect(env["RELAUNCH_NATS_URL"], user=ADMIN, connect_timeout=5,
                              password=read_password(run_dir(env) / "creds" / f"{ADMIN}.pass"))


class BusRecorder:
    """A core subscription to `relaunch.>` as the NATS admin user, on a thread of its own (the tests block
    while they wait for Slurm), keeping every message's subject and body."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.messages: list[tuple[str, bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="bus-recorder", daemon=True)
        self._nc = None

    def start(self) -> BusRecorder:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._subscribe(), self._loop).result(30)
        return self

    async def _subscribe(self) -> None:
        self._nc = await _admin_connection(self.env)

        async def keep(msg) -> None:
            self.messages.append((msg.subject, bytes(msg.data)))

        await self._nc.subscribe("relaunch.>", cb=keep, pending_msgs_limit=1_000_000,
                                 pending_bytes_limit=1 << 30)
        await self._nc.flush()

    def stop(self) -> None:
        if self._nc is not None:
            asyncio.run_coroutine_threadsafe(self._nc.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def on(self, subject: str) -> list[bytes]:
        return [data for subj, data in list(self.messages) if subj == subject]

    def holding(self, needle: str) -> list[str]:
        """Subjects of the messages whose body holds `needle`."""
        raw = needle.encode()
        return [subj for subj, data in list(self.messages) if raw in data]


def stream_bodies(env: dict, stream: str, subject: str, after_seq: int = 0) -> list[bytes]:
    """Every message body a stream holds on `subject` (a filter) after sequence `after_seq`, read by the admin
    user."""
    async def read() -> list[bytes]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc = await _admin_connection(env)
        try:
            js = nc.jetstream()
            start = {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": after_seq + 1} \
                if after_seq else {"deliver_policy": DeliverPolicy.ALL}
            sub = await js.pull_subscribe(subject, stream=stream, config=ConsumerConfig(
                ack_policy=AckPolicy.NONE, inactive_threshold=30, **start))
            bodies: list[bytes] = []
            while True:
                try:
                    batch = await sub.fetch(512, timeout=1.0)
                except Exception:  # noqa: BLE001 - nats-py's fetch timeout: nothing more
                    break
                bodies += [bytes(m.data) for m in batch]
            await sub.unsubscribe()
            return bodies
        finally:
            await nc.close()

    return asyncio.run(read())


def last_seq(env: dict, stream: str) -> int:
    """The stream's last sequence now (read what comes after it with stream_bodies' after_seq)."""
    async def read() -> int:
        nc = await _admin_connection(env)
        try:
            return (await nc.jetstream().stream_info(stream)).state.last_seq
        finally:
            await nc.close()

    return asyncio.run(read())


def dead_letters(env: dict, subject: str, after_seq: int = 0) -> list[dict]:
    """The DLQ stream's entries (after `after_seq`) for messages that were on `subject`."""
    from relaunch.common import subjects

    found = []
    for body in stream_bodies(env, subjects.DLQ.name, subjects.ALL_DLQ, after_seq):
        entry = json.loads(body)
        if entry.get("subject") == subject:
            found.append(entry)
    return found


def service_logs(env: dict) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (run_dir(env) / "log").glob("*.log")}


def assert_nowhere(env: dict, bus: BusRecorder, canary: str, job_ids: list[str]) -> None:
    """The canary is in no message of the bus, no DLQ entry, no API answer (with or without the token), no
    ledger record of these jobs and no log of the services."""
    from relaunch.common import subjects

    places: list[str] = [f"bus: {s}" for s in bus.holding(canary)]
    places += [f"DLQ stream: {body[:200]!r}" for body in stream_bodies(env, subjects.DLQ.name, subjects.ALL_DLQ)
               if canary.encode() in body]
    places += [f"API {path}" for path, body in api_answers(env, job_ids).items() if canary.encode() in body]
    places += [f"relaunch jobs show {job} --json" for job in job_ids if canary in json.dumps(show(env, job))]
    places += [f"service log {name}" for name, body in service_logs(env).items() if canary.encode() in body]
    assert not places, f"the canary {canary} (a root-only file's content) leaked to: {places}"


def elapsed(started: float) -> str:
    return f"{time.monotonic() - started:.0f} s"
