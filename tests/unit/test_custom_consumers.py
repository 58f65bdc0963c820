"""A custom consumer declared once (relaunch.common.custom_consumers): its NATS user, derived by natsauth,
may use its own durable and reply inbox and nothing else; a declaration that would reach relaunch's own
users, durables or streams is refused; the stack's and the compose file's declarations are valid ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from nats.js.api import AckPolicy, DeliverPolicy
from pydantic import TypeAdapter, ValidationError

from relaunch.common import consumers, natsauth, subjects
from relaunch.common.custom_consumers import CustomConsumer
from relaunch.common.subject_filters import within
from relaunch.common.settings import CommonSettings

REPO = Path(__file__).resolve().parents[2]
DECLARATIONS = TypeAdapter(tuple[CustomConsumer, ...])
WEBHOOK = CustomConsumer(name="advice-webhook", stream="ADVICE", filter_subjects=("relaunch.advice.>",))


def test_a_declared_consumer_may_read_and_ack_its_own_durable_and_nothing_else():
    perms = natsauth.permissions("c", [], custom=(WEBHOOK,))["advice-webhook"]
    assert perms == {
        "publish": {"allow": ["$JS.API.CONSUMER.INFO.ADVICE.advice-webhook",
                              "$JS.API.CONSUMER.MSG.NEXT.ADVICE.advice-webhook", "$JS.ACK.ADVICE.advice-webhook.>"]},
        "subscribe": {"allow": ["_INBOX_advice-webhook.>"]}}
    granted = " ".join(perms["publish"]["allow"] + perms["subscribe"]["allow"])
    assert "CREATE" not in granted and "relaunch." not in granted  # no consumer to make, no subject to publish
    assert not any(c.spec.durable in granted for c in consumers.ALL)


def test_one_that_may_not_ack_gets_no_right_to_and_its_durable_acks_nothing():
    reader = CustomConsumer(name="restarts-db", stream="EVENTS", filter_subjects=("relaunch.event.reconcile.>",),
                            ack=False, deliver="all")
    assert natsauth.custom_permissions(reader)["publish"]["allow"] == [
        "$JS.API.CONSUMER.INFO.EVENTS.restarts-db", "$JS.API.CONSUMER.MSG.NEXT.EVENTS.restarts-db"]
    config = reader.consumer_config()
    assert (config.durable_name, config.ack_policy, config.deliver_policy, config.filter_subject) == (
        "restarts-db", AckPolicy.NONE, DeliverPolicy.ALL, "relaunch.event.reconcile.>")


def test_the_durable_the_admin_creates_is_the_declaration():
    config = CustomConsumer.model_validate({"name": "pager", "stream": "EVENTS", "durable": "pager-v2",
                                            "filterSubjects": ["relaunch.event.audit.>", "relaunch.event.reconcile.>"],
                                            "ackWaitS": 60, "maxDeliver": 5}).consumer_config()
    assert (config.durable_name, config.ack_policy, config.deliver_policy, config.ack_wait, config.max_deliver) == (
        "pager-v2", AckPolicy.EXPLICIT, DeliverPolicy.NEW, 60, 5)
    assert config.filter_subject is None and config.filter_subjects == ["relaunch.event.audit.>",
                                                                        "relaunch.event.reconcile.>"]


@pytest.mark.parametrize("declaration, message", [
    ({"name": "x", "stream": "SIGNALS", "filterSubjects": ["relaunch.signal.log.>"]}, "EVENTS"),
    ({"name": "x", "stream": "DLQ", "filterSubjects": ["relaunch.dlq.>"]}, "EVENTS"),
    ({"name": "x", "stream": "EVENTS", "filterSubjects": ["relaunch.advice.>"]}, "not in stream EVENTS"),
    ({"name": "x", "stream": "EVENTS", "filterSubjects": [">"]}, "not in stream EVENTS"),
    ({"name": "x", "stream": "EVENTS", "filterSubjects": []}, "at least 1"),
    ({"name": "a.b", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]}, "pattern"),
    ({"name": "x", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"], "filter": "y"}, "Extra inputs"),
])
def test_a_declaration_outside_events_and_advice_or_malformed_is_refused(declaration, message):
    with pytest.raises(ValidationError, match=message):
        CustomConsumer.model_validate(declaration)


@pytest.mark.parametrize("declared, message", [
    ([{"name": "decider", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]}], "relaunch's own"),
    ([{"name": "gpu-probe-node1", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]}], "relaunch's own"),
    ([{"name": "x", "stream": "ADVICE", "durable": "actuator-advice", "filterSubjects": ["relaunch.advice.>"]}],
     "a relaunch service's"),
    ([{"name": "x", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"]},
      {"name": "x", "stream": "EVENTS", "filterSubjects": ["relaunch.event.>"]}], "declared twice"),
])
def test_a_declaration_that_takes_relaunchs_own_user_or_durable_is_refused(declared, message):
    with pytest.raises(ValueError, match=message):
        natsauth.permissions("c", [], custom=DECLARATIONS.validate_python(declared))


def test_its_password_file_and_authorization_entry_come_from_the_same_declaration(tmp_path):
    users = natsauth.all_users(["node1"], custom=(WEBHOOK,))
    passwords = natsauth.write_passwords(tmp_path, users)
    assert (tmp_path / "advice-webhook.pass").stat().st_mode & 0o777 == 0o600
    block = natsauth.authorization_config("c", ["node1"], passwords, custom=(WEBHOOK,), only=["advice-webhook"])
    entries = json.loads(block.split("users = ", 1)[1].rsplit("}", 1)[0])
    assert [e["user"] for e in entries] == ["advice-webhook"]
    assert entries[0]["permissions"] == natsauth.custom_permissions(WEBHOOK)


def test_the_declaration_is_read_from_the_settings(monkeypatch):
    monkeypatch.setenv("RELAUNCH_CUSTOM_CONSUMERS", json.dumps([WEBHOOK.facts()]))
    assert CommonSettings().custom_consumers == (WEBHOOK,)
    monkeypatch.delenv("RELAUNCH_CUSTOM_CONSUMERS")
    assert CommonSettings().custom_consumers == ()


def test_make_up_and_the_compose_demo_declare_the_pages_example():
    stack = re.search(r"^EXAMPLE_CONSUMERS='(.*)'$", "".join(p.read_text() for p in [REPO / "scripts" / "stack.sh", *sorted((REPO / "scripts" / "stack").glob("*.sh"))]), re.M)[1]
    compose = yaml.safe_load((REPO / "deploy" / "compose" / "compose.yaml").read_text())
    in_compose = compose["services"]["nats-setup"]["environment"]["RELAUNCH_CUSTOM_CONSUMERS"]
    page = (REPO / "docs" / "custom-consumer.md").read_text()
    for text in (stack, in_compose):
        (declared,) = DECLARATIONS.validate_json(text)
        assert (declared.name, declared.durable, declared.stream) == ("advice-webhook", "advice-webhook", "ADVICE")
        assert f'DURABLE = "{declared.durable}"' in page
        natsauth.check_custom((declared,))


@pytest.mark.parametrize("subject, pattern, inside", [
    ("relaunch.advice.>", "relaunch.advice.>", True), ("relaunch.advice.c.*", "relaunch.advice.>", True),
    ("relaunch.advice", "relaunch.advice.>", False), ("relaunch.>", "relaunch.advice.>", False),
    ("relaunch.*.x", "relaunch.advice.>", False), ("relaunch.event.audit.>", subjects.ALL_EVENTS, True),
])
def test_within(subject, pattern, inside):
    assert within(subject, pattern) is inside
