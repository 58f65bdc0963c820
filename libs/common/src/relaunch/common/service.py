"""The shell every service runs in: logging, signals, health endpoint, task supervision."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .health import Check, HealthServer
from .settings import CommonSettings, SettingsError, load_settings, require_backends
from .telemetry import setup_tracing

S = TypeVar("S")

log = logging.getLogger(__name__)


def setup_logging(service: str, level: str = "INFO") -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("nats").setLevel(logging.WARNING)


def bootstrap(service: str, settings_type: type[S],
              logged_as: str | Callable[[CommonSettings, S], str] | None = None) -> tuple[CommonSettings, S]:
    """The start of every composition root: the common settings and the service's own (an error names the
    variable: SettingsError), the backends the service needs (require_backends), logging and tracing under
    `logged_as` (a name, or a function of the settings that may raise SettingsError, e.g. gpu-probe[node])."""
    common = load_settings(CommonSettings)
    settings = load_settings(settings_type)
    require_backends(common, settings_type)
    name = logged_as(common, settings) if callable(logged_as) else (logged_as or service)
    setup_logging(name, common.log_level)
    setup_tracing(name, common.otlp_endpoint, common.trace_file)
    return common, settings


def run_main(service: str, amain: Callable[[], Awaitable[None]], errors: tuple[type[Exception], ...] = ()) -> None:
    """A service's entry point: run `amain`; a settings error (or one of `errors`, a bad file the service reads at
    start) is one line on stderr naming what to fix, exit status 1, not a traceback."""
    try:
        asyncio.run(amain())
    except (SettingsError, *errors) as exc:
        raise SystemExit(f"relaunch {service}: {exc}") from None


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
