"""What the client reads from the environment: the CommonSettings every service reads
(RELAUNCH_NATS_URL, RELAUNCH_API_URL, RELAUNCH_CLUSTER and the NATS user and TLS files), so that
each setting is read one way, in relaunch.common.settings, and the CLI and the services agree on it.
The URLs have no default: a command that needs one says which variable to set.

Read at each use, never at import: a shell or a test may change the environment between commands,
and `relaunch classify`, whose start-up is benchmarked, needs none of it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relaunch.common.settings import CommonSettings


def common() -> CommonSettings:
    from relaunch.common.settings import CommonSettings

    return CommonSettings()


def nats_url() -> str:
    """RELAUNCH_NATS_URL; relaunch.common.settings.NotSet when it is not set (no guessed default)."""
    from relaunch.common.settings import required_url

    return required_url(common(), "nats_url")


def api_url() -> str:
    """RELAUNCH_API_URL without a trailing slash; NotSet when it is not set."""
    from relaunch.common.settings import required_url

    return required_url(common(), "api_url").rstrip("/")


def cluster(given: str | None = None) -> str:
    """`given` (a --cluster option) when set, else RELAUNCH_CLUSTER, else the common default."""
    return given or common().cluster


def job_cluster() -> str:
    """The cluster of the Slurm job the calling code runs in: RELAUNCH_CLUSTER when set, else Slurm's
    own SLURM_CLUSTER_NAME, else the common default."""
    settings = common()
    if "cluster" in settings.model_fields_set:
        return settings.cluster
    return os.environ.get("SLURM_CLUSTER_NAME") or settings.cluster
