import datetime as dt
import threading

import pytest

from relaunch.common.schemas import FaultInjection
from relaunch.gpu_probe.adapters.fake_nvml import DEFAULT_NVLINK_ERRORS, FakeNvml
from relaunch.gpu_probe.domain.classification import classify

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def request(**kw) -> FaultInjection:
    return FaultInjection(cluster="c", node="n", requested_at=NOW, **kw)


@pytest.fixture
def fake() -> FakeNvml:
    return FakeNvml(8, clock=lambda: NOW)


def verdict(fake: FakeNvml, xids=()) -> str:
    return classify(fake.sample(), list(xids), 8, NOW).verdict


def test_a_fresh_fake_reads_eight_healthy_gpus(fake):
    s = fake.sample()
    assert s.gpu_count == 8 and len(s.gpus) == 8
    assert verdict(fake) == "healthy"
    assert len({g.uuid for g in s.gpus}) == 8


def test_an_injected_xid_is_an_event_with_the_clock_time(fake):
    assert fake.inject(request(fault="xid", code=79, gpu=2)) == "XID 79 on GPU 2"
    events = fake.wait_xids(0.5)
    assert [(e.gpu, e.code, e.at) for e in events] == [(2, 79, NOW)]
    assert fake.wait_xids(0.01) == []  # delivered once


def test_an_xid_wakes_a_waiting_thread_at_once(fake):
    got = []
    waiter = threading.Thread(target=lambda: got.extend(fake.wait_xids(5.0)))
    waiter.start()
    fake.inject(request(fault="xid", code=48, gpu=0))
    waiter.join(timeout=2)
    assert not waiter.is_alive() and [e.code for e in got] == [48]


def test_ecc_adds_uncorrectable_errors_and_fails_the_node(fake):
    fake.inject(request(fault="ecc", gpu=1, count=3))
    fake.inject(request(fault="ecc", gpu=1))
    g = fake.sample().gpus[1]
    assert g.ecc_uncorrected == 4 and g.ecc_uncorrected_aggregate == 4
    assert verdict(fake) == "failed"


def test_nvlink_errors_keep_coming_every_sample_until_cleared(fake):
    fake.sample()
    fake.inject(request(fault="nvlink", gpu=3, count=200, nvlink_counter="replay"))
    for _ in range(2):
        g = fake.sample().gpus[3]
        assert g.nvlink_replay_errors == 200 and g.nvlink_crc_errors == 0
    fake.inject(request(fault="clear"))
    assert fake.sample().gpus[3].nvlink_replay_errors == 0


def test_nvlink_without_a_count_degrades_the_node(fake):
    fake.sample()
    fake.inject(request(fault="nvlink", gpu=0))
    assert fake.sample().gpus[0].nvlink_crc_errors == DEFAULT_NVLINK_ERRORS
    assert verdict(fake) == "degraded"


def test_throttle_reports_the_reason(fake):
    fake.inject(request(fault="throttle", gpu=4, throttle="power_brake"))
    fake.inject(request(fault="throttle", gpu=4))
    assert fake.sample().gpus[4].throttle_reasons == ["hw_slowdown", "power_brake"]
    assert verdict(fake) == "degraded"


def test_a_lost_gpu_disappears_from_the_count(fake):
    fake.inject(request(fault="gpu-lost", gpu=7))
    s = fake.sample()
    assert s.gpu_count == 7 and s.gpus[7].lost and s.gpus[7].temperature_c is None
    assert verdict(fake) == "failed"


def test_clear_undoes_every_fault_and_drops_pending_xids(fake):
    for kw in (dict(fault="ecc", gpu=0), dict(fault="gpu-lost", gpu=1), dict(fault="throttle", gpu=2),
               dict(fault="xid", gpu=3, code=79)):
        fake.inject(request(**kw))
    assert fake.inject(request(fault="clear")) == "cleared every injected fault"
    assert verdict(fake) == "healthy" and fake.wait_xids(0.01) == []


def test_a_gpu_the_node_does_not_have_is_refused(fake):
    with pytest.raises(ValueError, match="GPU 8 does not exist"):
        fake.inject(request(fault="ecc", gpu=8))


def test_an_xid_request_needs_its_code():
    with pytest.raises(ValueError):
        request(fault="xid", gpu=0)
