"""Composition root of the API."""

from __future__ import annotations

import uvicorn

from relaunch.common.service import bootstrap
from relaunch.common.settings import SettingsError

from . import backends
from .app import create_app
from .settings import ApiSettings


def main() -> None:
    try:
        common, settings = bootstrap("api", ApiSettings)
    except SettingsError as exc:  # one line naming the variable, not a traceback (exit status 1)
        raise SystemExit(f"relaunch api: {exc}") from None
    # Redis is optional for the API: it holds the detector's progress histories (the progress chart);
    # without it the chart shows the ledger's markers alone.
    app = create_app(settings, lambda: backends.connect(common.database_url, common.nats_url, common.redis_url,
                                                        common.cluster))
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=common.log_level.lower(), access_log=False)
