"""Composition root of the API."""

from __future__ import annotations

import uvicorn

from relaunch.common.service import setup_logging
from relaunch.common.settings import CommonSettings, load_settings

from .app import create_app
from .settings import ApiSettings


def main() -> None:
    common = load_settings(CommonSettings)
    settings = load_settings(ApiSettings)
    setup_logging("api", common.log_level)
    uvicorn.run(create_app(common.database_url), host=settings.host, port=settings.port,
                log_level=common.log_level.lower(), access_log=False)
