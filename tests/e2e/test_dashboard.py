"""The dashboard in headless Chromium against the API served over HTTP, with real Postgres and NATS
from the test stack (the relaunch services are not needed: the test writes the ledger itself).

What it proves beyond tests/unit/test_api_dashboard.py: the SQL behind every view, the event stream
from JetStream, and a live update: with polling set to two minutes, an operator override posted
with the bearer token reaches the page through the stream within seconds.
Keeps screenshots at test-artifacts/dashboard.png and dashboard-hang-evidence-e2e.png (a hang's evidence).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import os
import shutil
import socket
import sys
import threading
from pathlib import Path

import asyncpg
import httpx
import pytest
import uvicorn

from relaunch.api import backends
from relaunch.api.app import create_app
from relaunch.api.settings import ApiSettings
from relaunch.common.schemas import HangEvidence, RankEvidence
from relaunch.decider.adapters import hang_evidence_store
from relaunch.decider.adapters.ledger import Ledger

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=7)]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("RELAUNCH_TEST_CHROMIUM", "/usr/bin/chromium")
# Debian's chromium, never a downloaded browser; flags keep it from calling home or needing a GPU.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TOKEN = "e2e-dashboard-token-0123456789"


def _sample_writer():
    """insert_timeline from the API's integration tests: one sample, written as the decider writes it."""
    path = REPO / "tests" / "integration" / "test_api_ledger.py"
    spec = importlib.util.spec_from_file_location("api_ledger_sample", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.insert_timeline


def _hang(cluster: str) -> HangEvidence:
    """Job 103's hang as the actuator reads it (issue 37): rank 1 on node2 stuck in a native call."""
    victim = ["pthread_cond_wait (/usr/lib/x86_64-linux-gnu/libc.so.6)", "all_reduce (torch/distributed/"
              "distributed_c10d.py:3252)", "train (/work/train.py:23)"]
    suspect = ["clock_nanosleep (/usr/lib/x86_64-linux-gnu/libc.so.6)", "train (/work/train.py:20)"]
    return HangEvidence(
        anomaly_id=f"{cluster}.103.0.hang", cluster=cluster, job_id="103", attempt=0, status="collected",
        blame="node", victims=[0], suspects=[1], suspect_nodes=["node2"], elapsed_s=2.1,
        reason="rank 1 on node2 is stuck in a native call (clock_nanosleep in libc.so.6 through ctypes) from "
               "train.py:20 (train) while rank 0 waits in all_reduce",
        ranks=[RankEvidence(rank=0, node="node1", pid=11, role="victim", where="collective", collective="all_reduce",
                            place="train.py:23 (train)", state="S", cpu_ticks=0, frames=victim),
               RankEvidence(rank=1, node="node2", pid=12, role="suspect", where="native", place="train.py:20 (train)",
                            call="clock_nanosleep in libc.so.6 through ctypes", state="S", cpu_ticks=0, frames=suspect)],
        collected_at=dt.datetime.now(dt.UTC))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def ledger_url(test_stack, unique):
    base = test_stack["RELAUNCH_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"CREATE DATABASE dash_{unique}")
    url = base.rsplit("/", 1)[0] + f"/dash_{unique}"
    ledger = await Ledger.connect(url)
    await ledger.migrate()
    await _sample_writer()(ledger.pool, f"c{unique}")
    await hang_evidence_store.record(ledger.pool, _hang(f"c{unique}"))
    await ledger.close()
    try:
        yield url
    finally:
        await admin.execute(f"DROP DATABASE dash_{unique} WITH (FORCE)")
        await admin.close()


@pytest.fixture
async def api_url(ledger_url, test_stack, tmp_path):
    """The API on a loopback port, in a thread with its own event loop (as `python -m relaunch.api` runs it)."""
    token_file = tmp_path / "api-token"
    token_file.write_text(TOKEN)
    app = create_app(ApiSettings(token_file=str(token_file)),
                     lambda: backends.connect(ledger_url, test_stack["RELAUNCH_NATS_URL"]))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=2) as http, asyncio.timeout(30):
            while True:  # up, and connected to NATS so that the page's stream is accepted
                try:
                    health = (await http.get("/healthz")).json()
                    if health["ok"] and health["checks"]["nats"]:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
        yield url
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


async def test_dashboard_shows_the_ledger_and_updates_live(api_url, ledger_url, unique):
    async_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed (requirements-dev.txt)")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium; make setup "
                    "does it as root) or point RELAUNCH_TEST_CHROMIUM at one")
    expect = async_api.expect
    cluster = f"c{unique}"
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1100})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            # Polling every two minutes: whatever changes on the page below came through the stream.
            await page.goto(f"{api_url}/?poll=120#job={cluster}%2F101")

            row = page.locator(f'#jobs tr[data-key="{cluster}/101"]')
            await expect(row.locator(".state")).to_have_text("RUNNING")
            await expect(page.locator("#jobs tbody tr")).to_have_count(4)  # every cluster, newest first
            timeline = page.locator("#timeline")
            await expect(timeline.locator('li[data-kind="reconcile"]')).to_have_count(3)
            # The API has a token: log excerpts only once the person gives it (issue 35, docs/security.md).
            await expect(timeline.locator('li[data-kind="anomaly"] .withheld')).to_contain_text("withheld")
            page.once("dialog", lambda dialog: dialog.accept(TOKEN))
            await page.click("#token")
            await expect(timeline.locator('li[data-kind="anomaly"] pre.evidence')).to_contain_text(
                "GPU has fallen off the bus")
            await expect(timeline.locator('li[data-kind="advice"]')).to_contain_text("XID 79 on an allocated node")
            node1 = page.locator(f'#nodes tr[data-node="{cluster}/node1"]')
            await expect(node1.locator(".health")).to_have_text("failed")
            await expect(node1.locator(".history")).to_contain_text("3 readings")
            await expect(node1.locator(".excluded")).to_contain_text("job 101")
            await expect(node1.locator(".excluded")).to_contain_text("job 103")
            await expect(page.locator("#live")).to_have_attribute("data-mode", "live", timeout=15_000)

            # The scheduler moved on (the decider would record this) and an operator switches the job
            # to observe: the override's audit event on EVENTS makes the page reload the ledger.
            conn = await asyncpg.connect(ledger_url)
            try:
                await conn.execute("UPDATE jobs SET state='COMPLETED', updated_at=now() WHERE cluster=$1 AND "
                                   "job_id='101'", cluster)
            finally:
                await conn.close()
            async with httpx.AsyncClient(base_url=api_url, timeout=5) as http:
                resp = await http.post(f"/v1/jobs/{cluster}/101/mode", json={"mode": "observe", "reason": "e2e"},
                                       headers={"Authorization": f"Bearer {TOKEN}"})
            assert resp.status_code == 201 and resp.json()["audited"] is True, resp.text
            await expect(row.locator(".state")).to_have_text("COMPLETED", timeout=10_000)
            await expect(row.locator(".mode")).to_have_text("observe (override)")
            await expect(timeline.locator('li[data-kind="override"]')).to_contain_text("operator set mode observe")
            ticker = page.locator(f'#events li[data-subject="relaunch.event.audit.{cluster}.101"]')
            await expect(ticker).to_have_count(1)

            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

            # A hang's evidence (issue 37) through the ledger's hang_evidence table: who was blamed, in words,
            # and the suspect's stack beside a victim's (the token was given above: the frames are shown).
            await page.locator(f'#jobs tr[data-key="{cluster}/103"]').click()
            hang = timeline.locator('li[data-kind="hang"]')
            await expect(hang.locator(".reason")).to_contain_text("rank 1 on node2 is stuck in a native call")
            await expect(hang.locator(".suspect-nodes")).to_have_text("suspect node: node2")
            await expect(hang.locator('figure[data-role="suspect"] pre.frames')).to_contain_text("clock_nanosleep")
            await expect(hang.locator('figure[data-role="victim"] pre.frames')).to_contain_text("all_reduce")
            await hang.screenshot(path=str(ARTIFACTS / "dashboard-hang-evidence-e2e.png"))
            assert not errors, errors
        finally:
            await browser.close()
