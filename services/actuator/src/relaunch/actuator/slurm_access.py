"""Which Slurm adapter the actuator and the watchdog use (RELAUNCH_SLURM_API): part of their composition roots."""

from __future__ import annotations

import logging

from relaunch.common.settings import CommonSettings, load_settings

from .adapters.slurm import Slurm
from .adapters.slurmrest import SlurmRest
from .settings import SlurmRestSettings
from .slurm_port import SlurmPort

log = logging.getLogger(__name__)


def slurm_adapter(common: CommonSettings, timeout_s: float = 15.0) -> SlurmPort:
    """cli: Slurm's commands (the default); rest: slurmrestd, with the CLI for steps it lacks when asked."""
    if common.slurm_api == "cli":
        return Slurm(timeout_s=timeout_s)
    rest = load_settings(SlurmRestSettings)
    log.info("Slurm through slurmrestd at %s (token from %s; TLS %s)", rest.url, rest.token_file,
             "verified" + (f" against {rest.ca_file}" if rest.ca_file else "") if rest.tls_verify else "NOT verified")
    return SlurmRest(rest.url, rest.token_file, timeout_s=rest.timeout_s, user_name=rest.user_name,
                     ca_file=rest.ca_file, tls_verify=rest.tls_verify,
                     cli_fallback=Slurm(timeout_s=timeout_s) if rest.cli_fallback else None)
