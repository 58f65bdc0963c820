"""Composition root of the API."""

from __future__ import annotations

import uvicorn

from relaunch.common.service import setup_logging
from relaunch.common.telemetry import setup_tracing
from relaunch.common.settings import CommonSettings, SettingsError, load_settings, require_backends

from . import backends
from .app import create_app
from .settings import ApiSettings


def main() -> None:
    try:
        common = load_settings(CommonSettings)
        settings = load_settings(ApiSettings)
        require_backends(common, ApiSettings)
    except SettingsError as exc:  # one line naming the variable, not a traceback (exit status 1)
        raise SystemExit(f"relaunch api: {exc}") from None
    setup_logging("api", common.log_level)
    setup_tracing("api", common.otlp_endpoint, common.trace_file)
    # Redis is optional for the API: it holds the detector's progress histories (the progress chart);
    # without it the chart shows the ledger's markers alone.
    app = create_app(settings, lambda: backends.connect(common.database_url, common.nats_url, common.redis_url,
                                                        common.cluster))
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=common.log_level.lower(), access_log=False)
