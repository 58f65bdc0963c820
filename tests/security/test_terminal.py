"""Attack: escape sequences and markup in a job's text (issue 35, item 7). A job named
`[bold red]x[/]<img src=x onerror=window.pwned=1>` followed by `ESC ]0;PWNED BEL ESC [2J` (set the terminal's
title, clear the screen) fails on a log line full of escape sequences. Printed as it was, the name and the
line ran in the operator's terminal (rich read the brackets as markup, the terminal ran the sequences) and the
HTML ran in the dashboard.

Proves the threat model's line "a terminal or browser showing relaunch's output ... may never cause: running
escape sequences or markup from a job's text" (docs/security.md, "Threat model"): `relaunch jobs show` and
`relaunch jobs` print no ESC (0x1b) or BEL (0x07) byte and show the brackets literally; the API's JSON holds
the name exactly, escaped; the dashboard shows it as text (no element made of it, no script run)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import pytest
from attacks import relaunch, run_dir, submit, token, wait_ledger

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=18)]

MARKUP = "[bold red]x[/]<img src=x onerror=window.pwned=1>"
NAME = MARKUP + "\x1b]0;PWNED\x07\x1b[2J"
LINE = "\x1b[31mSegmentation fault (core dumped)\x1b]0;PWNED\x07\x1b[2J [bold]boom[/bold] \x1b[0m"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def test_a_job_s_escape_sequences_and_markup_are_shown_as_text(services):
    env = services
    # (-o without %x: the name holds '/', which would make the output path a folder that does not exist)
    job = submit(env, "flaky-train.sh", "relaunch:max_attempts=2", name=NAME, STEP_SECONDS="0.2", CRASH_LINE=LINE,
                 output=str(run_dir(env) / "jobs" / "terminal-%j.out"))
    record = wait_ledger(env, job, "the crash line's anomaly",
                         lambda r: any(a["evidence"] for a in r.get("anomalies", [])))
    assert record["job"]["name"] == NAME, record["job"]["name"]
    assert any("\x1b]0;PWNED" in e["text"] for a in record["anomalies"] for e in a["evidence"]), record["anomalies"]

    for args, extra in ((("jobs", "show", job), {"RELAUNCH_API_TOKEN_FILE": str(run_dir(env) / "api-token")}),
                        (("jobs", "show", job), {"RELAUNCH_API_TOKEN_FILE": ""}),
                        (("jobs",), {})):
        out = relaunch(env, *args, **extra)
        assert out.returncode == 0, out.stderr
        shown = out.stdout + out.stderr
        assert b"\x1b" not in shown and b"\x07" not in shown, (args, shown[:3000])
        if args == ("jobs",):
            # The list fits 80 columns: a name is cut to its first 16 (an ellipsis after), which still shows
            # the brackets literally, not read as markup (read as markup, "[bold red]" and "[/]" would vanish).
            assert b"[bold red]x[/]" in shown, (args, shown[:3000])
            continue
        assert MARKUP.encode() in shown, (args, shown[:3000])  # the brackets literally, not read as markup
        assert b"PWNED" in shown, (args, shown[:3000])  # shown, escaped, not dropped
    shown = relaunch(env, "jobs", "show", job, RELAUNCH_API_TOKEN_FILE=str(run_dir(env) / "api-token")).stdout
    assert b"[bold]boom[/bold]" in shown, shown[:3000]

    cluster = env["RELAUNCH_CLUSTER"]
    with httpx.Client(base_url=env["RELAUNCH_API_URL"], timeout=30) as client:
        for path in (f"/v1/jobs/{cluster}/{job}", "/v1/jobs?limit=500", "/v1/advice?limit=500"):
            for headers in ({}, {"Authorization": f"Bearer {token(env)}"}):
                body = client.get(path, headers=headers).content
                assert b"\x1b" not in body and b"\x07" not in body, (path, body[:2000])
        assert json.loads(client.get(f"/v1/jobs/{cluster}/{job}").content)["job"]["name"] == NAME
    asyncio.run(dashboard_shows_text(env["RELAUNCH_API_URL"], f"{cluster}/{job}"))


async def dashboard_shows_text(api: str, key: str) -> None:
    async_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed (requirements-dev.txt)")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; make setup does it as root)")
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{api}/?poll=120#job={key.replace('/', '%2F')}")
            row = page.locator(f'#jobs tr[data-key="{key}"]')
            await async_api.expect(row).to_contain_text(MARKUP, timeout=30_000)
            title = page.locator("#timeline-title")
            await async_api.expect(title).to_contain_text(MARKUP, timeout=30_000)
            assert await page.locator("#jobs img, #timeline-title img, #timeline img").count() == 0
            assert await page.evaluate("window.pwned") is None, "the job's name ran as HTML"
            assert "PWNED" not in await page.title()
        finally:
            await browser.close()
