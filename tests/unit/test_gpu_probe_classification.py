import datetime as dt

import pytest

from relaunch.common.schemas import GpuReading
from relaunch.gpu_probe.domain.classification import Rules, classify, classify_xids
from relaunch.gpu_probe.domain.samples import Sample, XidEvent, counter_delta
from relaunch.gpu_probe.domain.xids import MAX_REMEMBERED, XID_TABLE, remember, xid_info

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def healthy_gpu(index: int, **kw) -> GpuReading:
    base = dict(index=index, temperature_c=40.0, ecc_corrected=0, nvlink_crc_errors=0, nvlink_replay_errors=0,
                nvlink_recovery_errors=0, pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
                remap_pending=False, remap_failure=False, utilization_pct=90.0)
    return GpuReading(**{**base, **kw})


def sample(n: int = 8, **changes: dict) -> Sample:
    """n healthy GPUs; `changes` maps "gN" to field overrides of GPU N."""
    gpus = tuple(healthy_gpu(i, **changes.get(f"g{i}", {})) for i in range(n))
    return Sample(gpus=gpus, gpu_count=sum(1 for g in gpus if not g.lost))


def xid(gpu: int, code: int, ago_s: float = 1.0) -> XidEvent:
    return XidEvent(gpu=gpu, code=code, at=NOW - dt.timedelta(seconds=ago_s))


def test_a_clean_node_is_healthy_with_no_reasons():
    a = classify(sample(), [], 8, NOW)
    assert (a.verdict, a.reasons, a.notes, a.xids) == ("healthy", (), (), ())


@pytest.mark.parametrize("code", [48, 64, 74, 79, 92, 94, 95, 119, 120, 140, 143])
def test_a_hardware_xid_fails_the_node_and_names_the_gpu_and_code(code):
    a = classify(sample(), [xid(5, code)], 8, NOW)
    assert a.verdict == "failed"
    assert any(f"GPU 5: XID {code}" in r and "hardware" in r for r in a.reasons)
    assert [(r.gpu, r.code, r.xid_class, r.count) for r in a.xids] == [(5, code, "hardware", 1)]
    assert a.gpus[5].xids == [code] and a.gpus[4].xids == []


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_an_application_xid_leaves_the_node_healthy_but_is_recorded(code):
    a = classify(sample(), [xid(0, code)], 8, NOW)
    assert a.verdict == "healthy" and a.reasons == ()
    assert a.xids[0].xid_class == "application" and any(f"XID {code}" in n for n in a.notes)


def test_an_application_xid_repeated_on_one_gpu_is_hardware():
    events = [xid(3, 13, ago_s=s) for s in (10, 200, 900)]
    a = classify(sample(), events, 8, NOW)
    assert a.verdict == "failed"
    rec = a.xids[0]
    assert (rec.gpu, rec.code, rec.xid_class, rec.count) == (3, 13, "hardware", 3)
    assert "repeated 3 times" in rec.description
    assert rec.first_at == NOW - dt.timedelta(seconds=900) and rec.last_at == NOW - dt.timedelta(seconds=10)


def test_an_application_xid_repeated_on_every_gpu_is_the_program():
    events = [xid(g, 13, ago_s=s) for g in range(8) for s in (10, 20, 30)]
    a = classify(sample(), events, 8, NOW)
    assert a.verdict == "healthy" and {r.xid_class for r in a.xids} == {"application"}


def test_repetition_below_the_threshold_stays_application():
    a = classify(sample(), [xid(3, 13, 10), xid(3, 13, 20)], 8, NOW, Rules(app_xid_repeat=3))
    assert a.verdict == "healthy"


def test_xid_63_is_a_recorded_remap_not_a_failure():
    a = classify(sample(), [xid(1, 63)], 8, NOW)
    assert a.verdict == "healthy" and a.xids[0].xid_class == "remap"


def test_an_xid_not_in_the_table_degrades():
    a = classify(sample(), [xid(1, 999)], 8, NOW)
    assert a.verdict == "degraded" and a.xids[0].xid_class == "unknown"


def test_xids_older_than_the_window_no_longer_count():
    rules = Rules(xid_window=dt.timedelta(minutes=10))
    assert classify(sample(), [xid(1, 79, ago_s=3600)], 8, NOW, rules).verdict == "healthy"
    assert classify(sample(), [xid(1, 79, ago_s=60)], 8, NOW, rules).verdict == "failed"


def test_a_lost_gpu_fails_the_node_once_not_twice():
    s = sample(g2={"lost": True})
    a = classify(s, [], 8, NOW)
    assert a.verdict == "failed" and s.gpu_count == 7
    assert a.reasons == ("GPU 2 is lost: NVML says it fell off the bus or stopped answering",)


def test_fewer_gpus_than_expected_fails_the_node():
    a = classify(sample(7), [], 8, NOW)
    assert a.verdict == "failed" and "7 of 8 expected GPUs" in a.reasons[0]


def test_more_gpus_than_expected_is_only_a_note():
    a = classify(sample(8), [], 4, NOW)
    assert a.verdict == "healthy" and "more than the 4 expected" in a.notes[0]


@pytest.mark.parametrize("fields, verdict, words", [
    ({"ecc_uncorrected": 2}, "failed", "2 uncorrectable ECC errors"),
    ({"remap_failure": True}, "failed", "could not be remapped"),
    ({"remap_pending": True}, "degraded", "remap is pending"),
    ({"retired_pages_pending": True}, "degraded", "page retirement is pending"),
    ({"nvlink_recovery_errors": 1}, "degraded", "NVLink recovery"),
    ({"nvlink_crc_errors": 80, "nvlink_replay_errors": 20}, "degraded", "100 NVLink CRC/replay"),
    ({"throttle_reasons": ["hw_slowdown"]}, "degraded", "clocks slowed down (hw_slowdown)"),
    ({"throttle_reasons": ["power_brake", "hw_thermal"]}, "degraded", "power_brake, hw_thermal"),
    ({"pcie_width": 8}, "degraded", "PCIe link x8 of x16"),
])
def test_readings_move_the_verdict(fields, verdict, words):
    a = classify(sample(g6=fields), [], 8, NOW)
    assert a.verdict == verdict
    assert any(r.startswith("GPU 6") and words in r for r in a.reasons), a.reasons


@pytest.mark.parametrize("fields", [
    {"nvlink_crc_errors": 5},
    {"ecc_uncorrected_aggregate": 3},
    {"pcie_gen": 1},
    {"ecc_corrected": 10_000},
])
def test_observations_below_a_fault_are_notes_not_reasons(fields):
    a = classify(sample(g1=fields), [], 8, NOW)
    assert a.verdict == "healthy" and a.reasons == ()


def test_an_idle_gpu_with_a_lower_pcie_generation_is_normal():
    a = classify(sample(g1={"pcie_gen": 1, "utilization_pct": 0.0}), [], 8, NOW)
    assert a.verdict == "healthy" and a.notes == ()


def test_unknown_fields_never_move_the_verdict():
    unknown = {name: None for name in ("temperature_c", "ecc_corrected", "retired_pages_pending", "remap_pending",
                                       "remap_failure", "nvlink_crc_errors", "nvlink_recovery_errors", "pcie_gen",
                                       "pcie_width", "pcie_width_max", "utilization_pct")}
    assert classify(sample(g0=unknown), [], 8, NOW).verdict == "healthy"


def test_the_worst_finding_wins_and_every_reason_is_kept():
    a = classify(sample(g1={"throttle_reasons": ["hw_thermal"]}), [xid(4, 79)], 8, NOW)
    assert a.verdict == "failed" and len(a.reasons) == 2


def test_the_table_holds_the_issue_classes():
    assert {c for c, i in XID_TABLE.items() if i.xid_class == "hardware"} == {
        48, 64, 74, 79, 92, 94, 95, 119, 120, 140, 143}
    assert {c for c, i in XID_TABLE.items() if i.xid_class == "application"} == {13, 31, 43, 45}
    assert xid_info(63).xid_class == "remap" and xid_info(12345).xid_class == "unknown"


def test_classify_xids_groups_per_gpu_and_code():
    recs = classify_xids([xid(1, 79, 5), xid(1, 79, 1), xid(0, 79, 2), xid(1, 48, 3)], gpu_total=8)
    assert [(r.gpu, r.code, r.count) for r in recs] == [(0, 79, 1), (1, 48, 1), (1, 79, 2)]


def test_remember_drops_old_events_and_stays_bounded():
    window = dt.timedelta(hours=1)
    kept = remember([xid(0, 79, ago_s=7200)], [xid(1, 48)], NOW, window)
    assert [(e.gpu, e.code) for e in kept] == [(1, 48)]
    storm = [xid(0, 13, ago_s=i / 100) for i in range(MAX_REMEMBERED + 50)]
    kept = remember((), storm, NOW, window)
    assert len(kept) == MAX_REMEMBERED and kept[-1].at == NOW  # the newest are kept


@pytest.mark.parametrize("previous, current, delta", [
    (None, 50, 0),    # the first sample sets the baseline
    (50, 80, 30),
    (80, 5, 5),       # the counter was reset
    (5, None, None),  # unreadable now
])
def test_counter_delta(previous, current, delta):
    assert counter_delta(previous, current) == delta


def test_an_expected_count_of_zero_skips_the_count_check():
    assert classify(sample(3), [], 0, NOW) == classify(sample(3), [], 3, NOW)
