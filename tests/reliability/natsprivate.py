"""A private nats-server with relaunch's users and permissions (relaunch.common.natsauth), for the
permission tests: the same generator and config shape as scripts/stack.sh, on its own port and store,
so these tests need no Slurm and can provoke violations without touching the shared stack's logs.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import nats

from relaunch.common import natsauth

REPO = Path(__file__).resolve().parents[2]
NATS_SERVER = REPO / ".venv" / "bin" / "nats-server"
PORT_BASE = int(os.environ.get("RELAUNCH_TEST_PORT_BASE", "24000"))
CLUSTER = "permtest"
NODES = ["node1", "node2"]


def port(offset: int) -> int:
    """A port for a private server: the test port base + 700 + offset (free of the stack's offsets)."""
    return PORT_BASE + 700 + offset


def _wait_port(p: int, proc: subprocess.Popen, log: Path, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", p)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nats-server did not listen on {p}: {log.read_text()[-2000:]}")


class PrivateNats:
    """nats-server -c <dir>/nats.conf with the generated authorization block (and `extra` config)."""

    def __init__(self, folder: Path, port_: int, extra: str = "") -> None:
        self.folder, self.port, self.extra = folder, port_, extra
        self.creds = folder / "creds"
        self.log = folder / "nats.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> PrivateNats:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise RuntimeError(f"port {self.port} is taken: set RELAUNCH_TEST_PORT_BASE to a free range")
        self.folder.mkdir(parents=True, exist_ok=True)
        auth = subprocess.run(
            [sys.executable, "-m", "relaunch.common.natsauth", "config", "--creds", str(self.creds),
             "--cluster", CLUSTER, "--nodes", ",".join(NODES)], check=True, capture_output=True, text=True).stdout
        (self.folder / "auth.conf").write_text(auth)
        (self.folder / "nats.conf").write_text(
            f'listen: "127.0.0.1:{self.port}"\njetstream {{ store_dir: "{self.folder}/js" }}\n'
            f'{self.extra}\ninclude "auth.conf"\n')
        self.proc = subprocess.Popen([str(NATS_SERVER), "-c", str(self.folder / "nats.conf")],
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        _wait_port(self.port, self.proc, self.log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def password(self, user: str) -> str:
        return natsauth.read_password(self.creds / f"{user}.pass")

    def env(self, user: str) -> dict[str, str]:
        """The RELAUNCH_NATS_* settings a process running as `user` gets."""
        return {"RELAUNCH_NATS_URL": self.url, "RELAUNCH_NATS_USER": user,
                "RELAUNCH_NATS_PASSWORD_FILE": str(self.creds / f"{user}.pass")}


class Client:
    """A connection as one user that records the server's permission errors."""

    def __init__(self, nc, errors: list[str]) -> None:
        self.nc, self.errors = nc, errors

    @classmethod
    async def connect(cls, server: PrivateNats, user: str, **kw) -> Client:
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        nc = await nats.connect(server.url, user=user, password=server.password(user),
                                inbox_prefix=natsauth.inbox_prefix(user), error_cb=on_error,
                                allow_reconnect=False, **kw)
        return cls(nc, errors)

    async def refused(self, verb: str, subject: str, timeout: float = 2.0) -> bool:
        """Whether the server reported a permissions violation for `verb` (publish | subscription) on `subject`."""
        wanted = f'permissions violation for {verb} to "{subject}"'.lower()  # nats-py lowercases the text
        end = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < end:
            if any(wanted in e.lower() for e in self.errors):
                return True
            await asyncio.sleep(0.02)
        return False

    async def close(self) -> None:
        await self.nc.close()
