"""classify(sample, xids, expected_gpus, now) -> verdict, reasons and classified XIDs. Pure.

Invariants:
- failed: the node should not run a job (a hardware XID, a lost or missing GPU, an uncorrected ECC
  error, a row that could not be remapped); degraded: it runs, but slower or needs a reset soon
  (throttling, a narrowed PCIe link, NVLink errors, a pending retirement or remap, an XID we do not
  know); healthy otherwise. The worst finding decides;
- every finding that moves the verdict is a reason; observations that do not are notes, so a
  reader of `reasons` sees only why the verdict is what it is;
- a field that is None (unsupported or unreadable) never moves the verdict: absence of evidence is
  not a fault.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from relaunch.common.schemas import GpuReading, Verdict, XidRecord

from .samples import Sample, XidEvent
from .xids import xid_info

_RANK = {"healthy": 0, "degraded": 1, "failed": 2}


@dataclass(frozen=True)
class Rules:
    xid_window: dt.timedelta = dt.timedelta(hours=1)
    """XIDs older than this no longer count (nor are reported)."""
    app_xid_repeat: int = 3
    """An application XID seen this often on one GPU within the window is treated as hardware, unless
    most of the node's GPUs repeat it too (then it is the program, which runs on all of them)."""
    nvlink_errors_per_sample: int = 100
    """CRC plus replay errors in one sample from which the links are degraded; a few are normal."""
    busy_utilization_pct: float = 50.0
    """Above this a PCIe link below its maximum generation is worth a note (idle GPUs downshift on purpose)."""


@dataclass(frozen=True)
class Assessment:
    verdict: Verdict
    reasons: tuple[str, ...]
    notes: tuple[str, ...]
    xids: tuple[XidRecord, ...]
    gpus: tuple[GpuReading, ...]
    """The sample's readings with `xids` filled in from the window."""


@dataclass
class _Findings:
    verdict: Verdict = "healthy"
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, verdict: Verdict, reason: str) -> None:
        self.reasons.append(reason)
        if _RANK[verdict] > _RANK[self.verdict]:
            self.verdict = verdict


def classify(sample: Sample, xids: Sequence[XidEvent], expected_gpus: int, now: dt.datetime,
             rules: Rules = Rules()) -> Assessment:
    found = _Findings()
    _gpu_count(sample, expected_gpus, found)
    found.notes.extend(sample.notes)
    gpu_total = max(expected_gpus, len(sample.gpus))
    records = classify_xids([e for e in xids if e.at >= now - rules.xid_window], gpu_total, rules)
    for rec in records:
        _xid_finding(rec, found)
    for gpu in sample.gpus:
        _gpu_findings(gpu, rules, found)
    codes: dict[int, set[int]] = defaultdict(set)
    for rec in records:
        codes[rec.gpu].add(rec.code)
    gpus = tuple(g.model_copy(update={"xids": sorted(codes[g.index])}) if codes.get(g.index) else g
                 for g in sample.gpus)
    return Assessment(found.verdict, tuple(found.reasons), tuple(found.notes), tuple(records), gpus)


def classify_xids(events: Sequence[XidEvent], gpu_total: int, rules: Rules = Rules()) -> list[XidRecord]:
    """One record per (GPU, code), with the class from the table, promoted to hardware when an
    application XID repeats on a few GPUs only."""
    grouped: dict[tuple[int, int], list[XidEvent]] = defaultdict(list)
    for event in events:
        grouped[(event.gpu, event.code)].append(event)
    repeaters: dict[int, set[int]] = defaultdict(set)
    for (gpu, code), seen in grouped.items():
        if xid_info(code).xid_class == "application" and len(seen) >= rules.app_xid_repeat:
            repeaters[code].add(gpu)
    records = []
    for (gpu, code), seen in sorted(grouped.items()):
        info = xid_info(code)
        xid_class, description = info.xid_class, info.description
        # A program fault hits every rank, hence every GPU; one GPU alone repeating it is the GPU.
        if gpu in repeaters.get(code, ()) and len(repeaters[code]) <= max(1, gpu_total // 2):
            xid_class = "hardware"
            description += f"; repeated {len(seen)} times on this GPU only, so treated as hardware"
        records.append(XidRecord(gpu=gpu, code=code, xid_class=xid_class, description=description,
                                 count=len(seen), first_at=min(e.at for e in seen),
                                 last_at=max(e.at for e in seen)))
    return records


def _gpu_count(sample: Sample, expected: int, found: _Findings) -> None:
    if expected == 0:  # the operator chose not to check the count
        return
    lost = sum(1 for g in sample.gpus if g.lost)
    missing = expected - sample.gpu_count
    if missing > lost:
        found.add("failed", f"{sample.gpu_count} of {expected} expected GPUs answer NVML "
                            f"({missing - lost} not found: fell off the bus before the probe started?)")
    elif sample.gpu_count > expected:
        found.notes.append(f"{sample.gpu_count} GPUs answer, more than the {expected} expected")


def _xid_finding(rec: XidRecord, found: _Findings) -> None:
    text = f"GPU {rec.gpu}: XID {rec.code} ({rec.description}), {rec.xid_class}, seen {rec.count}x"
    if rec.xid_class == "hardware":
        found.add("failed", text)
    elif rec.xid_class == "unknown":
        found.add("degraded", text)
    else:  # application (the program's fault) or remap (the memory repaired itself)
        found.notes.append(text)


def _gpu_findings(g: GpuReading, rules: Rules, found: _Findings) -> None:
    at = f"GPU {g.index}"
    if g.lost:
        found.add("failed", f"{at} is lost: NVML says it fell off the bus or stopped answering")
        return
    if g.ecc_uncorrected:
        found.add("failed", f"{at}: {g.ecc_uncorrected} uncorrectable ECC errors since the driver loaded")
    elif g.ecc_uncorrected_aggregate:
        found.notes.append(f"{at}: {g.ecc_uncorrected_aggregate} uncorrectable ECC errors in its lifetime")
    if g.remap_failure:
        found.add("failed", f"{at}: a memory row could not be remapped (no spare rows left)")
    if g.remap_pending:
        found.add("degraded", f"{at}: a memory row remap is pending a GPU reset")
    if g.retired_pages_pending:
        found.add("degraded", f"{at}: a page retirement is pending a GPU reset")
    if g.nvlink_recovery_errors:
        found.add("degraded", f"{at}: {g.nvlink_recovery_errors} NVLink recovery errors since the last sample")
    link_errors = (g.nvlink_crc_errors or 0) + (g.nvlink_replay_errors or 0)
    if link_errors >= rules.nvlink_errors_per_sample:
        found.add("degraded", f"{at}: {link_errors} NVLink CRC/replay errors since the last sample")
    elif link_errors:
        found.notes.append(f"{at}: {link_errors} NVLink CRC/replay errors since the last sample")
    if g.throttle_reasons:
        found.add("degraded", f"{at}: clocks slowed down ({', '.join(g.throttle_reasons)})")
    if g.pcie_width is not None and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
        found.add("degraded", f"{at}: PCIe link x{g.pcie_width} of x{g.pcie_width_max}")
    # An idle GPU lowers its PCIe generation to save power, so only a busy one running slow is notable.
    if (g.pcie_gen is not None and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max
            and (g.utilization_pct or 0) >= rules.busy_utilization_pct):
        found.notes.append(f"{at}: PCIe gen {g.pcie_gen} of {g.pcie_gen_max} while busy")
