"""The job page leads with what the job's failures cost (issue 40, item 2): ETTR, the checkpoints seen and a
lost-time bar per failure by part, from the API's `goodput` (headless Chromium over in-memory backends,
as tests/unit/test_api_dashboard.py; screenshot test-artifacts/dashboard-goodput.png)."""

from __future__ import annotations

import json

from test_api_dashboard import ARTIFACTS, ORIGIN, page  # noqa: F401 - the page fixture
from test_goodput_views import view


def test_the_job_page_shows_ettr_checkpoints_and_a_lost_time_bar_per_failure(page):  # noqa: F811
    detail = page.fakes.ledger.details[("local", "101")]
    detail["goodput"] = json.loads(json.dumps(view(), default=str))
    page.goto(f"{ORIGIN}/?poll=60#job=local%2F101")
    box = page.locator("#job-goodput")
    box.locator(".lost-failure").wait_for()
    assert "ETTR" in box.locator(".goodput-head").inner_text()
    assert "lost 6 min 41 s in 1 failure" in box.locator(".goodput-head").inner_text()
    assert box.locator(".checkpoints").inner_text() == "checkpoints saved: step 1000 (attempt 0)"
    failure = box.locator('.lost-failure[data-attempt="0"]')
    text = failure.inner_text()
    assert "failure of attempt 0 (hardware): lost 6 min 41 s since the checkpoint at step 1000" in text
    assert "resumed from the checkpoint at step 1000, as expected" in text
    parts = failure.locator(".lost-part").evaluate_all(
        "spans => spans.map(s => [s.dataset.part, s.getBoundingClientRect().width])")
    assert [p for p, _ in parts] == ["recomputation", "detection", "recovery", "startup", "warmup"]
    widths = dict(parts)
    assert widths["recomputation"] > widths["startup"] > widths["warmup"] > widths["detection"] > 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#timeline-section").screenshot(path=str(ARTIFACTS / "dashboard-goodput.png"))
    assert not page.errors, page.errors


def test_the_fleet_view_shows_ettr_mttr_and_the_time_lost_by_part_per_fault_class(page):  # noqa: F811
    from test_goodput_views import ANOMALIES, ATTEMPTS, FACTS, JOB, t

    from relaunch.api.domain.lost_time import fleet_view

    ledger = page.fakes.ledger
    before = ledger.fleet

    async def fleet(now, days=14, cluster=None):
        out = await before(now, days, cluster)
        return {**out, "goodput": fleet_view([(JOB, ATTEMPTS, ANOMALIES, FACTS)], t(2000), t(-60))}

    ledger.fleet = fleet
    page.goto(f"{ORIGIN}/?poll=60")
    box = page.locator("#fleet-goodput")
    box.locator('.lost-failure[data-class="hardware"]').wait_for()
    figures = box.locator(".figure").evaluate_all("fs => fs.map(f => [f.dataset.figure, f.firstChild.textContent])")
    assert dict(figures)["MTTR (detection + recovery + start-up)"] == "1 min 21 s"
    assert dict(figures)["ETTR"].endswith("%")
    hardware = box.locator('.lost-failure[data-class="hardware"]')
    assert "hardware: lost 6 min 41 s — recomputation 5 min 0 s, detection 3.0 s" in hardware.inner_text()
    assert hardware.locator(".lost-part").count() == 5
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#fleet-section").screenshot(path=str(ARTIFACTS / "dashboard-fleet-goodput.png"))
    assert not page.errors, page.errors
