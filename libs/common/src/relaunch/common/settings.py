"""Settings shared by every service; each service adds its own class with its own prefix.

Every field is documented beside its default. Unknown keys in a settings file are an error.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal, TypeVar, get_args, get_origin

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from .custom_consumers import CustomConsumer


class CommonSettings(BaseSettings):
    """Read from RELAUNCH_* environment variables (what `make up` writes to .run/env)."""

    model_config = SettingsConfigDict(env_prefix="RELAUNCH_", extra="ignore", frozen=True)

    nats_url: str = ""
    """Required (no default: a wrong backend must never be reached silently). NATS server with JetStream
    (`make up` writes the local stack's, on port 14222, to .run/env); for a cluster, its servers' URLs separated by commas
    (nats://n1:4222,nats://n2:4222,nats://n3:4222), tried in turn (docs/operator-guide.md, "A NATS cluster")."""
    nats_replicas: int = Field(default=1, ge=1, le=5)
    """Replicas of every stream and key-value bucket relaunch creates: 1 on a single server, 3 on a
    3-server cluster (R3: a stream keeps its messages and its leader while one server is down)."""
    database_url: str = ""
    """Required by the decider and the api: the Postgres ledger (decider writes, api reads)."""
    redis_url: str = ""
    """Required by the detector and the actuator: Redis for the hot state and the action rate limit."""
    api_url: str = ""
    """Required by the CLI's ledger commands: where the relaunch API listens (http://localhost:14080 for
    the local stack and a head-node install)."""
    cluster: str = "local"
    """Slurm cluster name; a subject token, so letters, digits, '_' and '-' only."""
    slurm_api: Literal["cli", "rest"] = "cli"
    """How the actuator and its watchdog reach Slurm: cli runs Slurm's commands (scontrol, squeue, sacct,
    sinfo; a head node with munge); rest talks to slurmrestd (RELAUNCH_SLURMRESTD_*: a pod beside
    Slinky, no Slurm clients, no munge). docs/slurm-versions.md says which steps each release offers."""
    log_level: str = "INFO"
    """Python logging level for the service."""
    otlp_endpoint: str = ""
    """OTLP/HTTP traces endpoint (e.g. http://collector:4318/v1/traces); empty: traces are not exported."""
    nats_user: str = ""
    """NATS user (docs/security.md); empty: connect without one, to a server without authorization."""
    nats_password_file: str = ""
    """File whose first line is the NATS user's password (a mounted Secret, or .run/creds/<user>.pass).
    A file, never the password itself: environments and command lines are visible to other tools."""
    nats_tls_ca: str = ""
    """CA bundle (PEM) that signed the NATS server's certificate; set: connect over TLS and verify it."""
    nats_tls_cert: str = ""
    """Client certificate (PEM) for a NATS server that verifies clients (mutual TLS); needs nats_tls_key."""
    nats_tls_key: str = ""
    """Private key (PEM) of nats_tls_cert."""
    custom_consumers: tuple[CustomConsumer, ...] = ()
    """Custom consumers of EVENTS or ADVICE, a JSON list (docs/custom-consumer.md): for each, the NATS
    setup makes a user with rights on its own durable only, and creates that durable. Read by
    `python -m relaunch.common.natsauth config|setup`; the services ignore it."""
    health_host: str = "127.0.0.1"
    """Address the /healthz and /metrics endpoint of every service listens on. Loopback by default;
    0.0.0.0 in a pod or container so that probes and Prometheus reach it over the network."""
    trace_file: str = ""
    """File to append one JSON line per finished span to; `{service}` in it becomes the service's name
    (e.g. /var/log/relaunch/{service}.spans.jsonl). Empty: no span file."""


URL_HINTS = {
    "nats_url": "the NATS server relaunch uses, e.g. nats://head:14222",
    "api_url": "the relaunch API, e.g. http://localhost:14080 on a head-node install",
    "database_url": "the Postgres ledger, e.g. postgresql://relaunch@db:5432/relaunch",
    "redis_url": "Redis, e.g. redis://redis:6379/0",
}


class NotSet(ValueError):
    """A backend URL the command needs is not set; the message names the variable and what to put in it."""


def required_url(settings: CommonSettings, name: str) -> str:
    """settings.<name> (a backend URL), or NotSet saying which RELAUNCH_* variable to set and how."""
    value = getattr(settings, name).strip()
    if not value:
        raise NotSet(f"RELAUNCH_{name.upper()} is not set: give it {URL_HINTS[name]} "
                     "(for the local stack: source .run/env)")
    return value


def nats_servers(url: str) -> list[str]:
    """The server URLs of a RELAUNCH_NATS_URL (one, or several separated by commas)."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if not servers:
        raise SettingsError("RELAUNCH_NATS_URL is empty: give a NATS URL (nats://host:4222), or a cluster's "
                            "URLs separated by commas")
    return servers


class ServiceSettings(BaseSettings):
    """Base for a service's own settings: unknown RELAUNCH_<SERVICE>_* keys are rejected."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    health_port: int = 0
    """Port of the /healthz and /metrics endpoint (on RELAUNCH_HEALTH_HOST); 0 picks a free one."""

    backends: ClassVar[tuple[str, ...]] = ()
    """The CommonSettings URLs this service cannot run without (e.g. "nats_url", "redis_url"): each
    must be given (require_backends); deployment checks derive each service's wiring from it."""


S = TypeVar("S", bound=BaseSettings)


class SettingsError(ValueError):
    """A setting is unknown or malformed; the message says which and what to do."""


def load_settings(cls: type[S]) -> S:
    """Build `cls` from the environment, refusing unknown keys under its prefix.

    pydantic-settings only reads declared fields from the environment, so a misspelt
    RELAUNCH_DETECTOR_POLL_INTERVL would be silently ignored; we refuse it instead.
    """
    import os

    prefix = (cls.model_config.get("env_prefix") or "").upper()
    if prefix and prefix != "RELAUNCH_":
        known = {f"{prefix}{name}".upper() for name in cls.model_fields}
        unknown = sorted(k for k in os.environ if k.upper().startswith(prefix) and k.upper() not in known)
        if unknown:
            raise SettingsError(
                f"unknown setting(s) {', '.join(unknown)}; {cls.__name__} accepts "
                f"{', '.join(sorted(known))}"
            )
    try:
        return cls()
    except Exception as exc:  # pydantic's: said in one line naming the variable (a service prints it and stops)
        raise SettingsError(_explained(cls, prefix, exc)) from exc


_PARSE_FAILED = re.compile(r'error parsing value for field "(\w+)"')
"""pydantic-settings' words when a list or dict setting is not JSON (it names the field, not the variable)."""


def _explained(cls: type[BaseSettings], prefix: str, exc: Exception) -> str:
    """One line: which variable, what it holds, what it expects ("RELAUNCH_ACTUATOR_PARTITIONS='canary' is
    not valid: it expects a JSON list, e.g. ["gpu", "canary"]")."""
    import os

    if isinstance(exc, ValidationError):
        said = []
        for error in exc.errors()[:5]:
            field = str(error["loc"][0]) if error.get("loc") else ""
            if field not in cls.model_fields:  # a check of several fields together: its own words
                said.append(f"invalid {cls.__name__}: {error['msg']}")
                continue
            got = str(error.get("input"))[:60] if not isinstance(error.get("input"), dict) else "..."
            said.append(f"{prefix}{field.upper()}={got!r} is not valid: {error['msg']}; it expects "
                        f"{_expects(cls, field)}")
        return "; ".join(said) or f"invalid {cls.__name__}: {exc}"
    found = _PARSE_FAILED.search(str(exc))
    if found:
        name = f"{prefix}{found.group(1).upper()}"
        got = next((v for k, v in os.environ.items() if k.upper() == name), "")
        return f"{name}={got[:60]!r} is not valid: it expects {_expects(cls, found.group(1))}"
    return f"invalid {cls.__name__}: {exc}"


def _expects(cls: type[BaseSettings], field: str) -> str:
    info = cls.model_fields.get(field)
    if info is None:
        return "a valid value"
    kind = get_origin(info.annotation) or info.annotation
    if kind in (list, tuple, set, frozenset):
        return 'a JSON list, e.g. ["a", "b"]'
    if kind is dict:
        return 'a JSON object, e.g. {"key": "value"}'
    if kind is Literal:
        return "one of " + ", ".join(map(str, get_args(info.annotation)))
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(kind, str(info.annotation))


def require_backends(common: CommonSettings, service: type[ServiceSettings]) -> None:
    """Refuse to start a service that was not told where a backend it needs is.

    CommonSettings' URLs have no default: a service started without, say, RELAUNCH_REDIS_URL would
    otherwise retry forever against nobody. The local stack, the tests and .run/env always set them.
    """
    missing = [f"RELAUNCH_{name.upper()}" for name in service.backends if name not in common.model_fields_set]
    if missing:
        raise SettingsError(
            f"{', '.join(missing)} not set: {service.__name__} needs "
            f"{'it' if len(missing) == 1 else 'them'} (the URL of each backend; `make up` writes them to .run/env)"
        )
