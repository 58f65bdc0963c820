"""A tiny /healthz and /metrics endpoint for every service, on RELAUNCH_HEALTH_HOST (127.0.0.1).

Kept dependency-free (asyncio streams) so that thin services do not pull in a web framework.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

Check = Callable[[], bool]


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
        results = {}
        for name, check in self.checks.items():
            try:
                results[name] = bool(check())
            except Exception:  # a failing check is a failed check, not a crash
                results[name] = False
        return all(results.values()), results

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else "/"
            if path.startswith("/metrics"):
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest()
            elif path.startswith("/healthz"):
                ok, results = self.report()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype = "application/json"
                body = json.dumps({"service": self.service, "ok": ok, "checks": results}).encode()
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
