"""The Slurm adapter over slurmrestd (RELAUNCH_SLURM_API=rest): the only module that talks HTTP to it.

It offers what adapters/slurm.py offers (the observer, reconciler and watchdog use either), so a
head node keeps the CLI adapter and a pod beside Slinky needs no Slurm clients and no munge key.

- The data_parser version (v0.0.4x) is read from slurmrestd's /openapi/v3 once, never pinned: the
  newest it offers (domain/rest_calls.py). The job listing has squeue --json's shape.
- Auth: a JWT (Slurm's auth/jwt) read from a file (a mounted Secret, or the stack's 0600 file) and
  sent in the X-SLURM-USER-TOKEN header; the file is read again when it changes, so a rotated token
  is picked up without a restart. Never logged, never on a command line.
- TLS: https URLs are verified against the system store, a CA file, or (never by default) not at all.
- Failures are mapped as the CLI adapter maps them: unreachable, timed out, 5xx or a refused token
  is temporary; "Invalid job id" means the job is gone; a refusal of the operation is permanent.
- A reconcile step the API lacks (requeue before 26.05) runs through the CLI adapter when
  cli_fallback is on (the host has Slurm's clients and munge), else it is refused for good, saying so.
"""

from __future__ import annotations

import datetime as dt
import grp
import logging
import os
import pwd
import ssl
import time
from dataclasses import replace
from typing import Any

import httpx

from relaunch.common.errors import PermanentError, TemporaryError

from ..domain.accounting import AccountedAttempt
from ..domain.commands import JOB_ID, NODE_NAME, check, drain_argv, step_argv
from ..domain.launches import BatchStep, batch_step_from_rest
from ..domain.observing import NodeCondition, Observed
from ..domain.rest_calls import REQUEUE_SINCE, SUPPORTED, Api, RestCall, pick_api, rest_call
from ..domain.node_facts import NodeFacts
from ..domain.rest_values import accounted_from_rest, error_text, facts_from_rest, first_job, node_conditions_from
from ..domain.slurm_values import Unreadable
from .slurm import _PERMANENT_MARKERS, SLURM_SECONDS, AccountingDisabled, JobGone, Slurm, observed_or_retry

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request (every poll) says nothing new

_MORE_PERMANENT = ("Job has already finished", "Requested operation is presently disabled")


def with_ids(records: list[AccountedAttempt]) -> list[AccountedAttempt]:
    """slurmdbd's records name a job's user and group but give no ids (tests/fixtures/slurmrest/*/
    slurmdb-job.json), and the detector reads a job's output only as its user could (JobObserved.user_id):
    the ids come from this host's user database, as slurmctld resolves them on a cluster with one
    directory; None where this host does not know the name (a pod without it: the file is not read)."""
    return [replace(r, user_id=_lookup(pwd.getpwnam, r.user_name), group_id=_lookup(grp.getgrnam, r.group_name))
            if r.user_id is None else r for r in records]


ID_TTL_S = 300.0
"""How long a name's id (or that it has none) is reused: a user added later is known this much later."""
_ids: dict[tuple[str, str], tuple[float, int | None]] = {}


def _lookup(getter, name: str) -> int | None:
    if not name:
        return None
    key, now = (getter.__name__, name), time.monotonic()
    cached = _ids.get(key)
    if cached is None or now - cached[0] > ID_TTL_S:
        try:
            entry = getter(name)
            found: int | None = entry.pw_uid if hasattr(entry, "pw_uid") else entry.gr_gid
        except KeyError:
            found = None
        if len(_ids) > 10_000:
            _ids.clear()
        cached = _ids[key] = (now, found)
    return cached[1]


class SlurmRest:
    def __init__(self, url: str, token_file: str, *, timeout_s: float = 8.0, user_name: str = "",
                 ca_file: str = "", tls_verify: bool = True, cli_fallback: Slurm | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not url:
            raise PermanentError("RELAUNCH_SLURMRESTD_URL is not set (RELAUNCH_SLURM_API=rest needs it)")
        if not token_file:
            raise PermanentError("RELAUNCH_SLURMRESTD_TOKEN_FILE is not set (RELAUNCH_SLURM_API=rest needs a JWT)")
        self.url, self.token_file, self.user_name = url.rstrip("/"), token_file, user_name
        self.timeout_s = timeout_s
        self.cli = cli_fallback
        verify: bool | ssl.SSLContext = tls_verify
        if ca_file and tls_verify:
            try:
                verify = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise PermanentError(f"RELAUNCH_SLURMRESTD_CA_FILE {ca_file}: not a readable PEM CA bundle: {exc}") from exc
        self.http = httpx.AsyncClient(base_url=self.url, timeout=timeout_s, verify=verify, transport=transport)
        self._token: tuple[float, str] | None = None
        self._api: Api | None = None
        self._release = "unknown"
        self._unreadable_seen: set[tuple[str, str]] = set()

    async def close(self) -> None:
        await self.http.aclose()

    # --- the wire ---------------------------------------------------------------------------------

    def _read_token(self) -> str:
        try:
            mtime = os.stat(self.token_file).st_mtime
            if self._token is None or self._token[0] != mtime:
                with open(self.token_file) as fh:
                    raw = fh.read().strip()
                # `scontrol token` prints SLURM_JWT=<token>; a Secret usually holds the token alone.
                self._token = (mtime, raw.removeprefix("SLURM_JWT=").strip())
        except OSError as exc:
            raise TemporaryError(f"cannot read the slurmrestd token file {self.token_file}: {exc}", delay=5.0) from exc
        if not self._token[1]:
            raise TemporaryError(f"the slurmrestd token file {self.token_file} is empty", delay=5.0)
        return self._token[1]

    async def _send(self, call: RestCall, label: str) -> dict:
        headers = {"X-SLURM-USER-TOKEN": self._read_token()}
        if self.user_name:
            headers["X-SLURM-USER-NAME"] = self.user_name
        started = time.monotonic()
        try:
            response = await self.http.request(call.method, call.path, json=call.body, params=call.params or None,
                                               headers=headers)
        except httpx.TimeoutException as exc:
            raise TemporaryError(f"slurmrestd {call.method} {call.path} timed out after {self.timeout_s}s",
                                 delay=2.0) from exc
        except httpx.HTTPError as exc:  # connection refused, TLS failure, ...
            raise TemporaryError(f"slurmrestd at {self.url} unreachable: {type(exc).__name__}: {exc}",
                                 delay=2.0) from exc
        finally:
            # The CLI adapter's histogram, "slurmrestd <request>" beside "squeue", "scontrol requeuehold"...
            SLURM_SECONDS.labels(f"slurmrestd {label}").observe(time.monotonic() - started)
        try:
            answer: Any = response.json()
        except ValueError:
            answer = {}
        if response.status_code < 400 and not error_text(answer):
            return answer if isinstance(answer, dict) else {}
        text = error_text(answer) or response.text[:300].strip() or f"HTTP {response.status_code}"
        what = f"slurmrestd {call.method} {call.path}"
        if response.status_code in (401, 403) and "permission" not in text.lower():
            self._token = None  # read the file again next time: it may have been rotated
            raise TemporaryError(f"{what}: HTTP {response.status_code}, the token was refused (expired? "
                                 f"RELAUNCH_SLURMRESTD_TOKEN_FILE): {text}", delay=5.0)
        if "Invalid job id" in text:
            raise JobGone(f"{what}: {text}")
        if any(m in text for m in _PERMANENT_MARKERS + _MORE_PERMANENT) or "Access/permission denied" in text:
            raise PermanentError(f"{what}: {text}")
        raise TemporaryError(f"{what} failed (HTTP {response.status_code}): {text}", delay=2.0)

    async def api(self) -> Api:
        """What this slurmrestd offers (asked once)."""
        if self._api is None:
            doc = await self._send(RestCall("GET", "/openapi/v3"), "openapi")
            self._api = pick_api(doc)
            version = (doc.get("info") or {}).get("version", "")
            self._release = version.split("&", 1)[0].removeprefix("Slurm-") or "unknown"
            if self._api.slurm not in SUPPORTED:
                log.warning("slurmrestd offers %s, newer than relaunch knows (%s): reading it as such",
                            self._api.slurm, SUPPORTED[-1])
            log.info("slurmrestd %s at %s: Slurm %s, data_parser %s (accounting: %s, requeue endpoint: %s)",
                     self._release, self.url, self._release, self._api.slurm, self._api.slurmdb or "none",
                     "yes" if self._api.has_requeue else f"no (needs {REQUEUE_SINCE}; "
                     + ("the CLI runs it" if self.cli else "restarts are refused") + ")")
        return self._api

    async def _get(self, path: str, label: str, **params: str) -> dict:
        return await self._send(RestCall("GET", path, params=params), label)

    # --- what the observer and reconciler ask -----------------------------------------------------

    async def version(self) -> str:
        await self.api()
        return self._release

    async def reachable(self) -> bool:
        """Whether slurmctld answers (`GET /slurm/V/ping/`, through slurmrestd): the leader steps down
        when it does not, for long (main.py). slurmrestd itself unreachable counts as not answering."""
        try:
            api = await self.api()
            pings = (await self._get(f"/slurm/{api.slurm}/ping/", "ping")).get("pings") or []
        except (TemporaryError, PermanentError):
            return False
        return any(isinstance(p, dict) and (p.get("responding") is True or p.get("pinged") == "UP") for p in pings)

    async def list_jobs(self) -> dict:
        """Every job slurmctld still knows (finished ones too), in squeue --json's shape."""
        api = await self.api()
        return await self._get(f"/slurm/{api.slurm}/jobs/", "jobs")

    async def _job(self, job_id: str) -> dict | None:
        api = await self.api()
        try:
            answer = await self._get(f"/slurm/{api.slurm}/job/{check(JOB_ID, job_id, 'job id')}", "job")
        except JobGone:
            return None
        try:
            return first_job(answer)
        except Unreadable as exc:
            raise TemporaryError(f"slurmrestd's job {job_id}: {exc}") from exc

    async def show_job(self, job_id: str) -> dict | None:
        """The job's object (squeue --json's shape, as the CLI adapter's show_job), or None when gone."""
        return await self._job(job_id)

    async def observe(self, job_id: str) -> Observed:
        job = await self._job(job_id)
        if job is None:
            return Observed.gone()
        return observed_or_retry(job, job_id, self._unreadable_seen, "slurmrestd's job")

    async def _slurmdb(self) -> str:
        api = await self.api()
        if api.slurmdb is None:
            raise AccountingDisabled("slurmrestd serves no /slurmdb (no openapi/slurmdbd plugin, or no slurmdbd)")
        return api.slurmdb

    async def accounting(self, job_ids: list[str]) -> list[AccountedAttempt]:
        """Every accounting record (one per attempt) of these job ids."""
        v = await self._slurmdb()
        records: list[AccountedAttempt] = []
        for job_id in job_ids:
            answer = await self._get(f"/slurmdb/{v}/job/{check(JOB_ID, job_id, 'job id')}", "slurmdb job")
            records += accounted_from_rest(answer)
        return with_ids(records)

    async def batch_step(self, job_id: str, submitted: dt.datetime) -> BatchStep | None:
        """The batch step of the job's attempt submitted at `submitted`, as slurmdbd recorded it (None: not
        recorded yet); it tells a launch Slurm refused from a script that ran (domain/launches.py)."""
        v = await self._slurmdb()
        answer = await self._get(f"/slurmdb/{v}/job/{check(JOB_ID, job_id, 'job id')}", "slurmdb job")
        return batch_step_from_rest(answer, job_id, submitted)

    async def accounting_since(self, start: dt.datetime) -> list[AccountedAttempt]:
        """Every accounting record of a job that was pending, running or ended since `start` (all users)."""
        v = await self._slurmdb()
        answer = await self._get(f"/slurmdb/{v}/jobs/", "slurmdb jobs", start_time=str(int(start.timestamp())),
                                 end_time=str(int(time.time())), show_duplicates="")
        return with_ids(accounted_from_rest(answer))

    async def node_facts(self) -> NodeFacts:
        """Usable nodes per partition, each node's NodeAddr, the nodes Slurm has given up on (one GET)."""
        api = await self.api()
        return facts_from_rest(await self._get(f"/slurm/{api.slurm}/nodes/", "nodes"))

    async def node_conditions(self, nodes: list[str]) -> dict[str, NodeCondition]:
        if not nodes:
            return {}
        wanted = [check(NODE_NAME, n, "node name") for n in nodes]
        api = await self.api()
        return node_conditions_from(await self._get(f"/slurm/{api.slurm}/nodes/", "nodes"), wanted)

    # --- acting -----------------------------------------------------------------------------------

    @staticmethod
    def drain_argv(node: str, reason: str) -> list[str]:
        return list(drain_argv(node, reason))

    async def drain(self, node: str, reason: str) -> None:
        await self.run_command(self.drain_argv(node, reason))

    @staticmethod
    def argv(step: str, job_id: str, nodes: list[str] | None = None) -> list[str]:
        return list(step_argv(step, job_id, nodes or ()))

    async def run_step(self, step: str, job_id: str, nodes: list[str] | None = None) -> None:
        await self.run_command(self.argv(step, job_id, nodes))

    async def run_command(self, argv: tuple[str, ...] | list[str]) -> None:
        """Do what a plan's command says (domain/commands.py), through slurmrestd."""
        api = await self.api()
        call = rest_call(tuple(argv), api, int(time.time()))
        if call is None:
            if self.cli is not None:
                log.info("slurmrestd %s has no form for %s (needs %s): running it with Slurm's command",
                         api.slurm, argv[1] if len(argv) > 1 else argv[0], REQUEUE_SINCE)
                await self.cli.run_command(argv)
                return
            raise PermanentError(
                f"slurmrestd (data_parser {api.slurm}, Slurm {self._release}) cannot run {' '.join(argv)}: the "
                f"requeue endpoint exists from {REQUEUE_SINCE} (Slurm 26.05) on; set "
                "RELAUNCH_SLURMRESTD_CLI_FALLBACK=true where the actuator has Slurm's clients, or upgrade")
        await self._send(call, " ".join(argv[:2]) if argv[0] == "scontrol" else argv[0])
