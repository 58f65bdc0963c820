"""Creating and checking the streams of `subjects.STREAMS` (the admin's setup step, natsauth)."""

from __future__ import annotations

import logging

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from . import subjects
from .errors import TemporaryError

log = logging.getLogger(__name__)


async def ensure_streams(js: JetStreamContext, user: str, replicas: int = 1) -> None:
    """Create or update every stream in `subjects.STREAMS` that is missing or differs (idempotent,
    safe to race). With NATS permissions on, only the admin user may create or change a stream
    (natsauth): a service then finds them made by the setup step and only reads their settings.
    `replicas`: RELAUNCH_NATS_REPLICAS (3 on a 3-server cluster; a stream's replicas can be raised in
    place, so a single server's streams become R3 when the cluster form takes over its store)."""
    for spec in subjects.STREAMS:
        config = StreamConfig(
            name=spec.name, subjects=list(spec.subjects), max_age=spec.max_age_s,
            duplicate_window=spec.duplicate_window_s, storage=StorageType.FILE,
            max_msgs_per_subject=spec.max_msgs_per_subject, num_replicas=replicas,
        )
        try:
            have = (await js.stream_info(spec.name)).config
        except nats.js.errors.NotFoundError:
            have = None
        if have is not None and _same_stream(have, config):
            continue
        try:
            if have is None:
                try:
                    await js.add_stream(config)
                except nats.js.errors.BadRequestError:  # created meanwhile with other settings
                    await js.update_stream(config)
            else:
                await js.update_stream(config)
        except nats.errors.TimeoutError as exc:  # a permissions violation is never answered
            if have is not None:
                log.warning("stream %s differs from this release's settings and %s may not change it: "
                            "run `python -m relaunch.common.natsauth setup` as admin", spec.name, user)
                continue
            raise TemporaryError(
                f"stream {spec.name} does not exist and NATS user of {user} may not create it: "
                "run `python -m relaunch.common.natsauth setup` as admin (scripts/stack.sh does)") from exc


def _same_stream(have: StreamConfig, want: StreamConfig) -> bool:
    return (sorted(have.subjects or []) == sorted(want.subjects or []) and have.storage == want.storage
            and abs((have.max_age or 0) - (want.max_age or 0)) < 1e-3
            and abs((have.duplicate_window or 0) - (want.duplicate_window or 0)) < 1e-3
            and (have.max_msgs_per_subject or -1) == (want.max_msgs_per_subject or -1)
            and (have.num_replicas or 1) == (want.num_replicas or 1))
