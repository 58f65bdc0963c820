"""The shell every service runs in: logging, signals, health endpoint, task supervision."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

from .health import Check, HealthServer

log = logging.getLogger(__name__)


def setup_logging(service: str, level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("nats").setLevel(logging.WARNING)


async def run_service(
    service: str,
    health_port: int,
    checks: dict[str, Check],
    tasks: Callable[[asyncio.Event], list[Awaitable[None]]],
    on_stop: Callable[[], Awaitable[None]] | None = None,
    health_host: str = "127.0.0.1",
) -> None:
    """Run `tasks(stop)` until SIGTERM/SIGINT or until one of them fails (then exit non-zero)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    health = HealthServer(service, checks, host=health_host, port=health_port)
    await health.start()
    running = [asyncio.ensure_future(t) for t in tasks(stop)]
    stopper = asyncio.ensure_future(stop.wait())
    failed = False
    try:
        done, _ = await asyncio.wait([*running, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception() is not None:
                failed = True
                log.error("%s: task failed", service, exc_info=task.exception())
    finally:
        stop.set()
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if on_stop:
            await on_stop()
        await health.close()
    if failed:
        raise SystemExit(1)
    log.info("%s: stopped", service)
