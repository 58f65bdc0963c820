"""A pulled message's Delivery (relaunch.common.outcomes): read off its JetStream reply subject, the
short form and the long one (with a domain and an account hash), and lazily for the ingest engine."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from relaunch.common.outcomes import Delivery, LazyDelivery, delivery_of

SHORT = "$JS.ACK.SIGNALS.detector-progress.3.123456.98765.1764847224612974000.100000"
LONG = "$JS.ACK.hub.ACCHASH.SIGNALS.detector-progress.3.123456.98765.1764847224612974000.100000.tok"


def _msg(reply: str) -> Msg:
    return Msg(_client=None, subject="relaunch.signal.progress.c.7", reply=reply, data=b"{}", headers=None)


@pytest.mark.parametrize("reply", [SHORT, LONG])
def test_a_delivery_is_read_off_the_reply_subject(reply):
    assert delivery_of(_msg(reply)) == Delivery("relaunch.signal.progress.c.7", 3, 123456)


@pytest.mark.parametrize("reply", [SHORT, LONG])
def test_a_lazy_delivery_reads_the_reply_subject_only_when_asked_and_once(reply):
    msg = _msg(reply)
    lazy = LazyDelivery(msg)
    assert lazy.subject == msg.subject and lazy._read is None, "the subject needs no parsing"
    assert (lazy.num_delivered, lazy.stream_seq) == (3, 123456)
    read = lazy._read
    assert read == delivery_of(msg) and lazy.stream_seq == 123456 and lazy._read is read
    assert repr(lazy) == repr(read)


def test_a_lazy_delivery_of_a_message_without_a_jetstream_reply_fails_when_read():
    lazy = LazyDelivery(_msg(""))
    assert lazy.subject == "relaunch.signal.progress.c.7"
    with pytest.raises(Exception):
        lazy.num_delivered
