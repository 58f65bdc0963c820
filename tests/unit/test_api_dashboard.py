"""The dashboard in headless Chromium, over in-memory backends: no server, no socket.

Playwright routes every request of the page to the app through Starlette's TestClient, so the
page, its script, the JSON endpoints and the event stream are the real ones. The run against real
Postgres and NATS, with a live update, is tests/e2e/test_dashboard.py.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from test_api_fakes import HOSTILE_NAME, Fakes, client

CHROMIUM = os.environ.get("RELAUNCH_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ORIGIN = "http://relaunch.test"
# Debian's chromium, never a downloaded browser; flags keep it from calling home or needing a GPU.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# Headers the fulfilled response recomputes itself; passing them on would contradict the body.
HOP_HEADERS = {"content-length", "transfer-encoding", "content-encoding", "connection"}


def browser_or_skip():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium; make setup "
                    "does it as root) or point RELAUNCH_TEST_CHROMIUM at one")
    return sync_api


@pytest.fixture
def page(request, tmp_path):
    """The dashboard's page; `indirect` parametrisation gives the API a bearer token."""
    sync_api = browser_or_skip()
    fakes = Fakes()
    token = getattr(request, "param", None)
    with client(fakes, tmp_path, token=token) as api, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

        def serve(route) -> None:
            request = route.request
            url = urlsplit(request.url)
            if f"{url.scheme}://{url.netloc}" != ORIGIN:
                route.abort()  # the page must not reach anywhere else
                return
            resp = api.request(request.method, url.path + (f"?{url.query}" if url.query else ""),
                               headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
                               content=request.post_data_buffer)
            route.fulfill(status=resp.status_code, body=resp.content,
                          headers={k: v for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS})

        context = browser.new_context(viewport={"width": 1400, "height": 1100})
        context.route("**/*", serve)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.fakes, page.errors, page.expect = fakes, errors, sync_api.expect
        try:
            yield page
        finally:
            browser.close()


def test_dashboard_shows_jobs_a_timeline_with_evidence_nodes_and_live_events(page):
    page.goto(f"{ORIGIN}/?poll=60")
    row = page.locator('#jobs tr[data-key="local/101"]')
    row.wait_for()
    assert row.locator(".state").inner_text() == "RUNNING"
    assert page.locator("#jobs-count").inner_text() == "1–2 of 2"

    timeline = page.locator("#timeline")
    timeline.locator('li[data-kind="reconcile"]').nth(2).wait_for()
    kinds = page.locator("#timeline > li").evaluate_all("items => items.map(i => i.dataset.kind)")
    assert kinds == ["attempt", "anomaly", "advice", "audit", "reconcile", "reconcile", "reconcile", "attempt"]
    anomaly = timeline.locator('li[data-kind="anomaly"]')
    assert "GPU has fallen off the bus" in anomaly.locator("pre.evidence").inner_text()
    advice = timeline.locator('li[data-kind="advice"]')
    assert "excluding node1" in advice.inner_text() and "restarting without node1" in advice.inner_text()
    assert "XID 79 (hardware) on an allocated node" in advice.locator("ul.reasons").inner_text()
    assert "CONVERGED" in timeline.locator('li[data-kind="reconcile"]').nth(2).inner_text()

    node1 = page.locator('#nodes tr[data-node="local/node1"]')
    assert node1.locator(".health").inner_text() == "failed"
    assert "2 readings" in node1.locator(".history").inner_text()
    assert "job 101" in node1.locator(".excluded").inner_text()

    # The event stream: the ticker lists what came. (Here every stream ends after its sample
    # events, as a fulfilled request must, so the badge flips between live and reconnecting; the
    # e2e test checks it stays live on a real stream.)
    page.locator('#events li[data-subject="relaunch.event.reconcile.local.101"]').first.wait_for(timeout=5000)

    # A job name full of markup is shown as text: no element is made from it.
    assert HOSTILE_NAME in row.inner_text()
    assert page.locator("#jobs img").count() == 0

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-fakes.png"), full_page=True)
    assert not page.errors, page.errors


def test_clicking_an_excluding_job_and_filtering_work(page):
    page.goto(f"{ORIGIN}/?poll=60")
    page.locator('#jobs tr[data-key="local/102"]').click()
    expect = page.expect
    expect(page.locator("#timeline-title")).to_contain_text("job 102")
    page.locator('#nodes tr[data-node="local/node1"] .excluded a').click()
    expect(page.locator("#timeline-title")).to_contain_text("job 101")
    assert "#job=local%2F101" in page.url

    page.fill('input[name="state"]', "COMPLETED")
    page.click('#job-filters button[type="submit"]')
    expect(page.locator("#jobs tbody tr")).to_have_count(1)
    assert page.locator("#jobs tbody tr").get_attribute("data-key") == "local/102"
    assert ("jobs", {"cluster": None, "states": ["COMPLETED"], "verdicts": None, "limit": 50, "offset": 0}) in \
        page.fakes.ledger.calls


def test_without_the_event_stream_the_page_polls_and_says_so(page):
    page.fakes.events.connected = False
    page.goto(f"{ORIGIN}/?poll=60")
    page.locator('#jobs tr[data-key="local/101"]').wait_for()
    page.expect(page.locator("#live")).to_have_attribute("title", re.compile("unavailable"))
    assert page.locator("#live").inner_text().startswith("polling")


API_TOKEN = "dashboard-test-token-0123456789"


@pytest.mark.parametrize("page", [API_TOKEN], indirect=True)
def test_where_the_api_has_a_token_log_excerpts_show_only_once_it_is_given(page):
    """issue 35: the evidence lines need the token; the rest of the timeline does not."""
    page.goto(f"{ORIGIN}/?poll=60")
    anomaly = page.locator('#timeline li[data-kind="anomaly"]')
    anomaly.wait_for()
    page.expect(anomaly.locator(".withheld")).to_contain_text("log excerpts withheld")
    assert anomaly.locator("pre.evidence").count() == 0
    assert "GPU fell off the bus" in anomaly.inner_text()  # the summary is not a log line

    page.once("dialog", lambda dialog: dialog.accept(API_TOKEN))
    page.click("#token")
    page.expect(anomaly.locator("pre.evidence")).to_contain_text("GPU has fallen off the bus")
    assert anomaly.locator(".withheld").count() == 0
    assert not page.errors, page.errors


def _with_hang_job(fakes) -> None:
    from test_api_fakes import sample_hang_job

    detail = sample_hang_job()
    fakes.ledger.details[("local", "103")] = detail
    fakes.ledger.rows.insert(0, {**detail["job"], "attempt_count": 1})


@pytest.mark.parametrize("page", [API_TOKEN], indirect=True)
def test_a_hangs_evidence_shows_who_was_blamed_and_the_stacks_once_the_token_is_given(page):
    """issue 37: the reason in words, the suspect nodes, the suspect rank's stack beside a victim's; the
    frames are the job's own text, withheld with its log lines until the token is given."""
    _with_hang_job(page.fakes)
    page.goto(f"{ORIGIN}/?poll=60#job=local%2F103")
    hang = page.locator('#timeline li[data-kind="hang"]')
    hang.wait_for()
    expect = page.expect
    expect(hang.locator(".title")).to_contain_text("blame node, suspect node node2")
    assert "rank 1 on node2 is stuck in a native call" in hang.locator(".reason").inner_text()
    assert hang.locator(".suspect-nodes").inner_text() == "suspect node: node2"
    expect(hang.locator(".withheld")).to_contain_text("stack frames withheld")
    assert hang.locator("pre.frames").count() == 0
    # who is who is no log line: the roles and places stay
    assert "rank 1 on node2: suspect, clock_nanosleep" in hang.locator('figure[data-role="suspect"]').inner_text()

    page.once("dialog", lambda dialog: dialog.accept(API_TOKEN))
    page.click("#token")
    suspect, victim = hang.locator('figure[data-role="suspect"]'), hang.locator('figure[data-role="victim"]')
    expect(suspect.locator("pre.frames")).to_contain_text("clock_nanosleep (/usr/lib/x86_64-linux-gnu/libc.so.6)")
    assert "rank 0 on node1: victim, all_reduce at train.py:23" in victim.locator("figcaption").inner_text()
    assert "c10d::Work::wait" in victim.locator("pre.frames").inner_text()
    assert hang.locator(".withheld").count() == 0
    kinds = page.locator("#timeline > li").evaluate_all("items => items.map(i => i.dataset.kind)")
    assert kinds.index("anomaly") < kinds.index("hang") < kinds.index("advice"), kinds
    hang.locator("details.ranks summary").click()
    assert hang.locator("details.ranks li").count() == 4
    ARTIFACTS.mkdir(exist_ok=True)
    hang.screenshot(path=str(ARTIFACTS / "dashboard-hang-evidence.png"))
    page.screenshot(path=str(ARTIFACTS / "dashboard-hang-job.png"), full_page=True)
    assert not page.errors, page.errors
