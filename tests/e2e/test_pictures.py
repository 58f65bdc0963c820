"""The pictures an operator looks at, in headless Chromium, over a real recovery on the Slurm test
cluster: a two-node Megatron-like job hangs after an XID on one of its nodes, relaunch restarts it
without that node, and the second attempt completes. What a person sees is asserted: points on the
progress chart for both attempts, the anomaly, Advice, reconcile and restart markers at the ledger's
times (the hang marker between the two attempts' points), the hang's silence, the XID said once with
its count in the marker's evidence, and the fleet view counting the recovery. Screenshots at desktop
(1440x900) and laptop (1280x800) widths go to test-artifacts/screenshots/."""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from slurmjobs import VENV_BIN, job_fields, ledger, sbatch, wait_until

from relaunch.actuator.domain.hostlists import expand

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=44)]
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("RELAUNCH_TEST_CHROMIUM", "/usr/bin/chromium")
# Debian's chromium, never a downloaded browser; nothing that calls home, no GPU, no QUIC.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SIZES = {"desktop": (1440, 900), "laptop": (1280, 800)}


def iso_t(value: str) -> float:
    return dt.datetime.fromisoformat(value).timestamp()


@pytest.fixture(scope="module")
def recovery(services):
    """The recovery, once for the module: (job, bad node, its ledger record)."""
    env = {**os.environ, **services}
    job = sbatch(services, "megatron-like.sh", "relaunch:max_attempts=2", "--nodes=2", STEPS="10",
                 STEP_SECONDS="1", HANG_AFTER="6")
    fields = wait_until("the job to run on two nodes", lambda: (f := job_fields(job))["JobState"] == "RUNNING" and f)
    bad = expand(fields["NodeList"])[1]
    time.sleep(2)
    out = subprocess.run([str(VENV_BIN / "relaunch"), "inject", "xid", "--node", bad, "--code", "79"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    wait_until("the hang to be restarted", lambda: (r := ledger(job)) and r["advice"] and
               r["advice"][0]["status"] == "CONVERGED", timeout=90)
    subprocess.run([str(VENV_BIN / "relaunch"), "inject", "clear", "--node", bad], env=env, capture_output=True,
                   timeout=30)
    wait_until("the second attempt to complete", lambda: job_fields(job)["JobState"] == "COMPLETED", timeout=60)
    time.sleep(1.5)  # the last log lines followed and recorded
    return job, bad, ledger(job)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM}: make setup installs Debian's chromium (as root)")
    profile = tempfile.mkdtemp(prefix="relaunch-chromium-")
    with sync_api.sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                        viewport={"width": 1440, "height": 900})
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def open_job(browser, services, job: str, size: tuple[int, int]):
    page = browser.new_page()
    page.set_viewport_size({"width": size[0], "height": size[1]})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"{services['RELAUNCH_API_URL']}/?poll=120#job={services['RELAUNCH_CLUSTER']}%2F{job}")
    page.locator("#progress-chart svg .point").first.wait_for(timeout=30000)
    return page, errors


def at_least(locator, n: int, timeout: float = 30.0) -> int:
    """Wait until `locator` matches `n` elements or more (polled here: the page's CSP forbids the
    string evaluation Playwright's wait_for_function relies on)."""
    end = time.monotonic() + timeout
    while (count := locator.count()) < n:
        assert time.monotonic() < end, f"{locator} matched {count}, fewer than {n}"
        time.sleep(0.2)
    return count


def x_of(locator) -> float:
    box = locator.bounding_box()
    return box["x"] + box["width"] / 2


def test_the_progress_chart_shows_both_attempts_and_every_event_at_its_time(services, recovery, browser):
    job, bad, record = recovery
    SHOTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    page, errors = open_job(browser, services, job, SIZES["desktop"])
    chart = page.locator("#progress-chart svg")
    first = chart.locator('.point[data-attempt="0"][data-field="step"]')
    second = chart.locator('.point[data-attempt="1"][data-field="step"]')
    at_least(second, 3)
    assert first.count() >= 2 and second.count() >= 3, (first.count(), second.count())
    # Markers: one per anomaly, Advice and reconcile step of the ledger, and the restart.
    (anomaly,) = record["anomalies"]
    (advice,) = record["advice"]
    assert chart.locator(".marker-anomaly").count() == 1
    assert chart.locator(".marker-advice").count() == 1
    assert chart.locator(".marker-reconcile").count() == len(advice["reconcile"]) >= 2
    assert chart.locator(".marker-restart").count() == 1
    hang = chart.locator(".marker-anomaly")
    assert abs(float(hang.get_attribute("data-t")) - iso_t(anomaly["detected_at"])) < 0.01
    # On screen: the hang after attempt 0's last point, before attempt 1's first; the restart at attempt 1.
    last_of_first = max(x_of(first.nth(i)) for i in range(first.count()))
    first_of_second = min(x_of(second.nth(i)) for i in range(second.count()))
    assert last_of_first < x_of(hang) < first_of_second
    assert x_of(chart.locator(".marker-advice")) >= x_of(hang) - 1
    assert chart.locator('[data-guide="hang"]').count() == 1
    # Hover on the Advice: its evidence, the XID said once with a count and a span.
    chart.locator(".marker-advice .marker-head").hover()
    detail = page.locator("#marker-detail")
    page.locator('#marker-detail:has-text("XID 79")').wait_for()
    text = detail.inner_text()
    assert text.count("XID 79") == 1 and re.search(r"seen \d+x \d\d:\d\d:\d\d", text), text
    assert bad in text
    page.locator("#timeline-section").screenshot(path=str(SHOTS / "job-progress-desktop-1440x900.png"))
    chart.locator(".marker-anomaly .marker-head").hover()
    page.locator('#marker-detail:has-text("hang")').wait_for()
    page.screenshot(path=str(SHOTS / "job-page-desktop-1440x900.png"))
    page.close()
    page, errors2 = open_job(browser, services, job, SIZES["laptop"])
    at_least(page.locator('#progress-chart .point[data-attempt="1"]'), 3)
    page.locator("#progress-chart svg .marker-advice .marker-head").hover()
    page.locator("#timeline-section").screenshot(path=str(SHOTS / "job-progress-laptop-1280x800.png"))
    page.close()
    assert errors == [] and errors2 == [], errors + errors2
    print(f"browser checks of the progress chart: {time.monotonic() - started:.1f} s")


def test_the_fleet_view_counts_the_recovery_and_names_the_node(services, recovery, browser):
    job, bad, record = recovery
    for name, size in SIZES.items():
        page, errors = open_job(browser, services, job, size)
        fleet = page.locator("#fleet-section")
        at_least(page.locator("#fleet-by-class .bar"), 1)
        restarts = int(fleet.locator('[data-figure="restarts"] .figure-value').inner_text())
        assert restarts >= 1
        assert fleet.locator('#fleet-by-class .bar[data-class="hang"]').count() >= 1
        assert fleet.locator("#fleet-lost .lost").count() >= 1
        row = fleet.locator(f'#fleet-nodes tr[data-node="{bad}"]')
        assert row.count() == 1 and "XID 79" in row.inner_text()
        health = fleet.locator("#fleet-health").inner_text()
        assert re.search(r"leader \(actuator lease\): (?!none)\S+", health) and "DLQ: " in health, health
        assert fleet.locator('tr[data-durable="decider-anomalies"]').count() == 1
        fleet.scroll_into_view_if_needed()
        fleet.screenshot(path=str(SHOTS / f"fleet-{name}-{size[0]}x{size[1]}.png"))
        page.close()
        assert errors == [], errors
