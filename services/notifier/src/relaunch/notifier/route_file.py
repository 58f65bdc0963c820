"""The routes file (TOML, RELAUNCH_NOTIFIER_ROUTES_FILE): where to post which events.

    [[routes]]
    name = "ops-slack"
    url_file = "/etc/relaunch/notifier/ops-slack.url"     # the webhook URL is a secret: from a file
    token_file = ""                                       # optional: Authorization: Bearer <file's token>
    events = ["job_stopped", "node_excluded", "advice_abandoned", "relaunch_unhealthy"]
    clusters = []                                         # empty: every cluster
    per_minute = 20                                       # rate limit (token bucket) ...
    burst = 5                                             # ... and how many at once
    digest_over = 3                                       # more at once than this: one digest post
    timeout_s = 5
    metadata = true                                       # add the "relaunch" object to the payload

Read and validated once at start: an unknown key, an unknown event kind, a missing or empty secret
file stop the notifier with the reason (docs/notifications.md). The secret files are read again at
each post, so rotating a webhook URL or token needs no restart.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .domain.notices import KINDS


class RoutesFileError(ValueError):
    """The routes file cannot be used; the message says which key and why."""


class Route(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    url_file: str
    token_file: str = ""
    events: tuple[str, ...] = KINDS
    clusters: tuple[str, ...] = ()
    per_minute: float = Field(20.0, gt=0)
    burst: int = Field(5, ge=1)
    digest_over: int = Field(3, ge=1)
    timeout_s: float = Field(5.0, gt=0, le=30)
    metadata: bool = True

    @field_validator("events")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown event kinds {unknown}: use some of {list(KINDS)}")
        return value

    def wants(self, kind: str, cluster: str) -> bool:
        return kind in self.events and (not self.clusters or not cluster or cluster in self.clusters)

    def url(self) -> str:
        return read_secret(self.url_file, f"route {self.name}: url_file")

    def token(self) -> str:
        return read_secret(self.token_file, f"route {self.name}: token_file") if self.token_file else ""


def read_secret(path: str, what: str) -> str:
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise RoutesFileError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    if not text:
        raise RoutesFileError(f"{what} {path} is empty")
    return text


def load_routes(path: str) -> tuple[Route, ...]:
    if not path:
        return ()
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise RoutesFileError(f"the routes file {path} cannot be read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RoutesFileError(f"the routes file {path} is not TOML: {exc}") from exc
    unknown = sorted(set(data) - {"routes"})
    if unknown:
        raise RoutesFileError(f"the routes file {path}: unknown top-level keys {unknown} (only [[routes]])")
    routes = []
    for i, raw in enumerate(data.get("routes") or []):
        try:
            route = Route.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise RoutesFileError(f"the routes file {path}, route {i + 1}: {problems}") from None
        route.url()  # the secrets must be there at start
        route.token()
        routes.append(route)
    names = [r.name for r in routes]
    if len(set(names)) != len(names):
        raise RoutesFileError(f"the routes file {path}: route names must differ ({names})")
    return tuple(routes)
