"""`python -m relaunch.common.natsauth config|setup`: the NATS users' passwords and authorization block, and
the streams and custom consumers' durables created as admin (the rules are in the package, __init__.py).
Apart from the rules so that they import nothing of the connection this uses."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from ..connection import Bus
from ..settings import CommonSettings
from . import __doc__ as RULES_DOC
from . import (
    ADMIN, SHARED_PROBE, all_users, authorization_config, check_custom, write_passwords,
)


async def setup_streams() -> None:
    """Create or update every stream, and every declared custom consumer's durable, as the admin user
    (credentials and RELAUNCH_CUSTOM_CONSUMERS from the RELAUNCH_* settings)."""
    settings = CommonSettings()
    check_custom(settings.custom_consumers)
    bus = await Bus.connect(settings.nats_url, ADMIN, wait_s=30)
    try:
        for consumer in settings.custom_consumers:
            # Creating it again with the same configuration is harmless; a changed filter, ack_wait or
            # max_deliver updates it; a changed `deliver` is refused by the server (remove the durable first).
            await bus.js.add_consumer(consumer.stream, consumer.consumer_config())
    finally:
        await bus.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relaunch.common.natsauth", description=RULES_DOC.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    config = sub.add_parser("config", help="write missing passwords and print the nats-server authorization block")
    config.add_argument("--creds", required=True, type=Path, help="folder of <user>.pass files (created, mode 700)")
    config.add_argument("--cluster", required=True)
    config.add_argument("--nodes", default="", help="comma-separated node names (one gpu-probe user each)")
    config.add_argument("--shared-probe-user", action="store_true",
                        help=f"add the user {SHARED_PROBE!r} for every node's probe (a DaemonSet sharing one Secret)")
    config.add_argument("--only", default="", help="comma-separated users: print only their entries (e.g. a custom "
                        "consumer's, to add to a NATS that has relaunch's users already)")
    sub.add_parser("setup", help="create or update the streams and the custom consumers' durables as admin "
                   "(RELAUNCH_NATS_* and RELAUNCH_CUSTOM_CONSUMERS settings)")
    args = parser.parse_args(argv)
    if args.command == "config":
        nodes = [n for n in args.nodes.split(",") if n]
        custom = CommonSettings().custom_consumers  # RELAUNCH_CUSTOM_CONSUMERS
        check_custom(custom)
        passwords = write_passwords(args.creds, all_users(nodes, args.shared_probe_user, custom))
        only = [u for u in args.only.split(",") if u] or None
        sys.stdout.write(authorization_config(args.cluster, nodes, passwords, args.shared_probe_user, custom, only))
    else:
        asyncio.run(setup_streams())
    return 0


if __name__ == "__main__":
    sys.exit(main())
