"""TLS to NATS (RELAUNCH_NATS_TLS_*): with a CA made here by openssl, a service connects to a TLS-only
nats-server with its user and verifies the server; without the CA, or with the wrong one, it does not."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys

import pytest
from faults import ONE_RELEASE, SLURM
from natsprivate import PrivateNats, port

from relaunch.common.connection import Bus, connect_options
from relaunch.common.errors import TemporaryError
from relaunch.common.settings import CommonSettings, SettingsError

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed"),
              # a private NATS and the services' TLS settings: nothing here touches Slurm
              pytest.mark.skipif(SLURM != ONE_RELEASE, reason="TLS does not depend on Slurm: checked on one release")]


def _ca(folder, name: str) -> None:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-keyout", str(folder / f"{name}.key"), "-out", str(folder / f"{name}.crt")],
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("nats-tls")
    _ca(d, "ca")
    _ca(d, "other-ca")
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(d / "server.key"), "-out", str(d / "server.csr")], check=True, capture_output=True)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    subprocess.run(["openssl", "x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.crt"),
                    "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2", "-extfile", str(d / "san.ext"),
                    "-out", str(d / "server.crt")], check=True, capture_output=True)
    srv = PrivateNats(d / "server", port(2),
                      extra=f'tls {{ cert_file: "{d}/server.crt", key_file: "{d}/server.key" }}').start()
    subprocess.run([sys.executable, "-m", "relaunch.common.natsauth", "setup"], check=True, timeout=60,
                   env={**os.environ, **srv.env("admin"), "RELAUNCH_NATS_TLS_CA": str(d / "ca.crt")})
    yield srv, d
    srv.stop()


def settings_for(srv: PrivateNats, ca) -> CommonSettings:
    return CommonSettings(nats_user="decider", nats_password_file=str(srv.creds / "decider.pass"),
                          nats_tls_ca=str(ca) if ca else "")


async def test_a_service_connects_over_tls_and_verifies_the_server(tls_server):
    srv, d = tls_server
    options = connect_options(settings_for(srv, d / "ca.crt"))
    assert isinstance(options["tls"], ssl.SSLContext) and options["tls"].verify_mode == ssl.CERT_REQUIRED
    bus = await Bus.connect(srv.url, "decider", wait_s=5, options=options)
    try:
        assert bus.connected and bus.nc.connected_url.scheme in ("nats", "tls")
        assert bus.nc._transport._io_writer.get_extra_info("ssl_object") is not None, "the connection is encrypted"
    finally:
        await bus.close()


@pytest.mark.parametrize("ca", [None, "other-ca.crt"])
async def test_without_the_right_ca_nothing_connects(tls_server, ca):
    srv, d = tls_server
    with pytest.raises(TemporaryError, match="not reachable"):  # bounded: a failed handshake never hangs
        options = connect_options(settings_for(srv, d / ca if ca else None))
        await Bus.connect(srv.url, "decider", wait_s=1, options=options)


def test_unreadable_tls_files_are_a_clear_settings_error(tmp_path):
    with pytest.raises(SettingsError, match="RELAUNCH_NATS_TLS"):
        connect_options(CommonSettings(nats_tls_ca=str(tmp_path / "missing.crt")))
    with pytest.raises(SettingsError, match="go together"):
        connect_options(CommonSettings(nats_tls_cert=str(tmp_path / "c.crt")))
