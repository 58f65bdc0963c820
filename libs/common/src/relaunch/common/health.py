"""A tiny /healthz and /metrics endpoint for every service, on RELAUNCH_HEALTH_HOST (127.0.0.1).

Kept dependency-free (asyncio streams) so that thin services do not pull in a web framework.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

Check = Callable[[], "bool | tuple[bool, str]"]
"""A readiness check: whether the service can do its part of the job now, with the reason when it cannot
(a bare bool: no reason to give)."""


class HealthServer:
    def __init__(self, service: str, checks: dict[str, Check], host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        self.checks = checks
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("%s: health on http://%s:%d/healthz", self.service, self.host, self.port)
        return self.port

    async def close(self) -> None:
        if self._server:
            self._server.close()

    def report(self) -> tuple[bool, dict[str, bool]]:
        ok, results, _ = self.report_with_reasons()
        return ok, results

    def report_with_reasons(self) -> tuple[bool, dict[str, bool], dict[str, str]]:
        """Whether every check passes, each check's result, and why each failing one failed."""
        results, reasons = {}, {}
        for name, check in self.checks.items():
            try:
                got = check()
                passed, why = (bool(got[0]), str(got[1])) if isinstance(got, tuple) else (bool(got), "")
            except Exception as exc:  # a failing check is a failed check, not a crash
                passed, why = False, f"the check raised {type(exc).__name__}: {exc}"
            results[name] = passed
            if not passed:
                reasons[name] = why or f"{name} is not ready"
        return all(results.values()), results, reasons

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else "/"
            if path.startswith("/metrics"):
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest()
            elif path.startswith("/healthz"):
                ok, results, reasons = self.report_with_reasons()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype = "application/json"
                body = json.dumps({"service": self.service, "ok": ok, "checks": results, "reasons": reasons}).encode()
            else:
                status, ctype, body = "404 Not Found", "application/json", b'{"error": "try /healthz or /metrics"}'
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()


class Reachability:
    """Whether a backend a service needs answers: the value of a health check, and never silent.

    The first failure is logged at WARNING, then one line every `every_s` while the outage lasts, and
    one when the backend answers again; `reachable` is False meanwhile, so /healthz reports not-ready.
    """

    def __init__(self, backend: str, where: str, every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend, self.where, self.every_s, self.clock = backend, without_password(where), every_s, clock
        self.reachable = True
        self._warned_at: float | None = None

    def failed(self, why: object) -> None:
        self.reachable = False
        now = self.clock()
        if self._warned_at is None or now - self._warned_at >= self.every_s:
            self._warned_at = now
            log.warning("%s at %s is unreachable: %s", self.backend, self.where, why)

    def succeeded(self) -> None:
        if not self.reachable:
            log.warning("%s at %s answers again", self.backend, self.where)
        self.reachable, self._warned_at = True, None

    def record(self, ok: bool, why: object = "no answer") -> bool:
        if ok:
            self.succeeded()
        else:
            self.failed(why)
        return ok


def without_password(url: str) -> str:
    """`url` fit for a log line: a password in it (postgresql://user:PASSWORD@host/db) becomes ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def answered_within(last_answer: float, now: float, limit_s: float, what: str) -> tuple[bool, str]:
    """A readiness check's result: `what` answered no longer than `limit_s` ago (monotonic seconds)."""
    quiet = now - last_answer
    return quiet <= limit_s, f"{what} has not answered for {quiet:.0f} s (more than {limit_s:g} s)"


def readable_dirs(paths: tuple[str, ...] | list[str], setting: str) -> tuple[bool, str]:
    """A readiness check's result: every directory in `paths` exists and this process may list and read it."""
    unreadable = [p for p in paths if not (os.path.isdir(p) and os.access(p, os.R_OK | os.X_OK))]
    return not unreadable, f"not readable by this service: {', '.join(unreadable)} ({setting})"
