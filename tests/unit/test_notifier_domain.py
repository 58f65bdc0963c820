"""The notifier's pure parts: which events become notices, the Slack-compatible payload, pacing."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from relaunch.common.schemas import AuditEntry, DeadLetter, ReconcileStatus
from relaunch.notifier.domain import pacing
from relaunch.notifier.domain.notices import Notice, notices_of_audit, notices_of_dead_letter, notices_of_reconcile
from relaunch.notifier.domain.payload import key_of, payload

T0 = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.UTC)


def audit(action, **detail):
    return AuditEntry(cluster="c1", job_id="7", service="decider", action=action, detail=json.dumps(detail),
                      idempotency_key=f"decider.c1.7.0.{action}", at=T0)


def test_a_stop_is_a_job_stopped_notice_with_its_reason_and_a_stable_key():
    (n,) = notices_of_audit(audit("stop", reason="application error: budget of 0 restarts spent"))
    assert (n.kind, n.key, n.cluster, n.job_id) == ("job_stopped", "job_stopped:decider.c1.7.0.stop", "c1", "7")
    assert "stopped job 7 on c1" in n.title and n.text == "application error: budget of 0 restarts spent"
    assert notices_of_audit(audit("stop", reason="x"))[0].key == n.key


def test_a_restart_without_nodes_is_a_node_excluded_notice_and_a_plain_restart_is_none():
    (n,) = notices_of_audit(audit("restart", reason="XID 79", exclude_nodes=["node3"]))
    assert n.kind == "node_excluded" and n.nodes == ("node3",) and "left node3 out of job 7" in n.title
    assert notices_of_audit(audit("restart", reason="segfault")) == []
    kinds = [x.kind for x in notices_of_audit(audit("terminate", reason="hung", exclude_nodes=["node2"]))]
    assert kinds == ["job_stopped", "node_excluded"]


def test_other_services_audits_and_unparsable_details_are_handled():
    other = AuditEntry(cluster="c1", job_id="7", service="actuator", action="stop", detail="", idempotency_key="k",
                       at=T0)
    assert notices_of_audit(other) == []
    raw = AuditEntry(cluster="c1", job_id="7", service="decider", action="stop", detail="not json",
                     idempotency_key="k2", at=T0)
    assert notices_of_audit(raw)[0].text == "not json"


def test_abandoned_advice_and_dead_letters_become_notices_but_not_the_notifier_s_own():
    status = ReconcileStatus(cluster="c1", job_id="7", generation=2, status="ABANDONED", reason="expired", at=T0)
    (n,) = notices_of_reconcile(status)
    assert n.key == "advice_abandoned:c1.7.2" and "generation 2" in n.title
    assert notices_of_reconcile(status.model_copy(update={"status": "CONVERGED"})) == []
    letter = DeadLetter(service="decider", subject="relaunch.event.anomaly.c1.7", reason="not JSON", payload="x",
                        payload_bytes=1, at=T0)
    (d,) = notices_of_dead_letter(letter, 41)
    assert d.kind == "relaunch_unhealthy" and d.key == "relaunch_unhealthy:dlq.41" and "not JSON" in d.text
    assert notices_of_dead_letter(letter.model_copy(update={"service": "notifier"}), 42) == []


def notice(i: int, kind="job_stopped", text="why") -> Notice:
    return Notice(kind, f"{kind}:k{i}", "c1", str(i), f"relaunch stopped job {i}", text, T0 + dt.timedelta(seconds=i))


def test_one_notice_is_a_slack_message_with_the_key_inside_and_text_escaped():
    body = payload([notice(1, text="<!channel> & <http://evil|click>")])
    assert set(body) == {"text", "blocks", "relaunch"}
    assert body["relaunch"]["idempotency_key"] == "job_stopped:k1" and body["relaunch"]["events"][0]["job_id"] == "1"
    flat = json.dumps(body["blocks"]) + body["text"]
    assert "<!channel>" not in flat and "&lt;!channel&gt; &amp; &lt;http://evil|click&gt;" in flat
    assert body["blocks"][0]["type"] == "section" and body["blocks"][0]["text"]["type"] == "mrkdwn"
    assert "relaunch" not in payload([notice(1)], metadata=False)


def test_a_digest_lists_its_events_and_its_key_does_not_depend_on_order():
    many = [notice(i) for i in range(25)]
    body = payload(many)
    assert body["relaunch"]["kind"] == "digest" and len(body["relaunch"]["events"]) == 25
    assert "25 events" in body["text"] and "and 5 more" in body["blocks"][1]["text"]["text"]
    assert key_of(many) == key_of(list(reversed(many))) != key_of(many[:-1])
    assert key_of(many).startswith("digest:")
    with pytest.raises(ValueError):
        payload([])


def test_pacing_posts_each_under_the_limit_a_digest_in_a_storm_and_holds_without_tokens():
    first = pacing.plan([notice(1), notice(2)], None, per_minute=6, burst=3, digest_over=3, now=T0)
    assert [len(p) for p in first.posts] == [1, 1] and first.bucket.tokens == 1.0
    storm = pacing.plan([notice(i) for i in range(10)], first.bucket, 6, 3, 3, T0)
    assert [len(p) for p in storm.posts] == [10] and storm.bucket.tokens == 0.0 and not storm.held
    held = pacing.plan([notice(11)], storm.bucket, 6, 3, 3, T0 + dt.timedelta(seconds=4))
    assert held.posts == () and len(held.held) == 1 and held.retry_in == pytest.approx(6.0)
    later = pacing.plan([notice(11)], held.bucket, 6, 3, 3, T0 + dt.timedelta(seconds=10))
    assert [len(p) for p in later.posts] == [1]


def test_backoff_doubles_up_to_its_cap():
    assert [pacing.backoff(n, 2, 30) for n in (1, 2, 3, 4, 5, 6)] == [2, 4, 8, 16, 30, 30]
