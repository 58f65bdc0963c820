"""The permission table itself (relaunch.common.natsauth, pure) and the client side of credentials
(relaunch.common.connection.connect_options): fast checks of what the server tests prove end to end."""

from __future__ import annotations

import os

import pytest

from relaunch.common import natsauth, subjects
from relaunch.common.natsauth import __main__ as natsauth_cli
from relaunch.common.connection import connect_options
from relaunch.common.settings import CommonSettings, SettingsError

NODES = ["node1", "node2"]


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: '*' one token, '>' the rest."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def allowed(user: str, verb: str, subject: str, shared: bool = False) -> bool:
    perms = natsauth.permissions("c1", NODES, shared)[user]
    return any(matches(p, subject) for p in perms[verb]["allow"])


USERS = natsauth.all_users(NODES, shared_probe=True)


@pytest.mark.parametrize("user", USERS)
def test_only_the_decider_and_admin_may_publish_advice(user):
    assert allowed(user, "publish", subjects.advice("c1", "42"), True) == (user in ("decider", "admin"))


@pytest.mark.parametrize("user", USERS)
def test_only_the_actuator_and_admin_may_use_the_advice_consumer(user):
    s, d = subjects.ADVICE.name, subjects.ACTUATOR_ADVICE.durable
    for api in (f"$JS.API.CONSUMER.MSG.NEXT.{s}.{d}", f"$JS.ACK.{s}.{d}.1.2.3.4.5",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{s}.{d}", f"$JS.API.CONSUMER.INFO.{s}.{d}"):
        assert allowed(user, "publish", api, True) == (user in ("actuator", "admin")), (user, api)
    # Another consumer on ADVICE (an ephemeral one, or a durable of another name): admin only.
    for api in (f"$JS.API.CONSUMER.CREATE.{s}", f"$JS.API.CONSUMER.DURABLE.CREATE.{s}.other"):
        assert allowed(user, "publish", api, True) == (user == "admin"), (user, api)


@pytest.mark.parametrize("user", USERS)
def test_nobody_but_admin_creates_or_deletes_streams(user):
    for api in ("$JS.API.STREAM.CREATE.ADVICE", "$JS.API.STREAM.DELETE.EVENTS", "$JS.API.STREAM.PURGE.DLQ",
                "$JS.API.STREAM.UPDATE.SIGNALS"):
        assert allowed(user, "publish", api, True) == (user == "admin"), (user, api)


def test_a_probe_may_publish_only_its_own_nodes_health():
    assert allowed("gpu-probe-node1", "publish", subjects.signal_node("c1", "node1"))
    assert not allowed("gpu-probe-node1", "publish", subjects.signal_node("c1", "node2"))
    assert not allowed("gpu-probe-node1", "publish", subjects.signal_node("c2", "node1"))
    # The shared DaemonSet user: any node of its cluster, nothing else.
    assert allowed("gpu-probe", "publish", subjects.signal_node("c1", "node7"), True)
    assert not allowed("gpu-probe", "publish", subjects.signal_job("c1", "1"), True)


def test_every_reply_inbox_is_private():
    perms = natsauth.permissions("c1", NODES, True)
    for user in USERS:
        if user == "admin":
            continue
        subs = perms[user]["subscribe"]["allow"]
        assert f"{natsauth.inbox_prefix(user)}.>" in subs
        assert not any(matches(p, "_INBOX.x") or matches(p, "_INBOX_other.x") for p in subs), user


def test_config_writes_private_password_files_and_keeps_them(tmp_path, capsys):
    natsauth_cli.main(["config", "--creds", str(tmp_path / "creds"), "--cluster", "c1", "--nodes", "node1"])
    first = capsys.readouterr().out
    assert first.startswith("authorization {") and '"user": "gpu-probe-node1"' in first
    files = sorted(p.name for p in (tmp_path / "creds").iterdir())
    assert files == sorted(f"{u}.pass" for u in natsauth.all_users(["node1"]))
    assert all(oct(os.stat(tmp_path / "creds" / f).st_mode & 0o777) == "0o600" for f in files)
    natsauth_cli.main(["config", "--creds", str(tmp_path / "creds"), "--cluster", "c1", "--nodes", "node1"])
    assert capsys.readouterr().out == first, "passwords are generated once, then kept"


def test_connect_options_read_the_password_from_its_file(tmp_path):
    path = tmp_path / "decider.pass"
    path.write_text("s3cret-value\n")
    options = connect_options(CommonSettings(nats_user="decider", nats_password_file=str(path)))
    assert options == {"user": "decider", "password": "s3cret-value", "inbox_prefix": "_INBOX_decider"}
    assert connect_options(CommonSettings(nats_user="", nats_password_file="")) == {}


@pytest.mark.parametrize("user,content,match", [
    ("decider", None, "cannot read RELAUNCH_NATS_PASSWORD_FILE"),
    ("decider", "\n", "empty"),
    ("", "x\n", "RELAUNCH_NATS_USER is not"),
])
def test_bad_credentials_settings_are_clear_errors(tmp_path, user, content, match):
    path = tmp_path / "p.pass"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError, match=match):
        connect_options(CommonSettings(nats_user=user, nats_password_file=str(path)))
