"""What the CLI prints is laid out for the reader: `--help` sentences are not broken where the source
wrapped them, and `relaunch events tail` piped writes one line per message (issue 40, item 5)."""

from __future__ import annotations

import json

from rich.console import Console
from typer.testing import CliRunner

from relaunch.client import cli
from relaunch.common.schemas import AuditEntry


def _commands(app):
    for info in app.registered_commands:
        yield info
    if app.registered_callback is not None:
        yield app.registered_callback
    for group in app.registered_groups:
        yield from _commands(group.typer_instance)


def test_every_help_paragraph_is_one_line_for_rich_to_wrap():
    for info in _commands(cli.app):
        text = info.help if isinstance(info.help, str) else (info.callback.__doc__ or "")
        for paragraph in text.strip().split("\n\n"):
            lines = paragraph.split("\n")
            assert len(lines) == 1 or any(line.startswith(" ") for line in lines[1:]), (info.callback, paragraph)


def test_help_at_80_columns_breaks_only_where_rich_wraps():
    out = CliRunner().invoke(cli.app, ["--help"], env={"COLUMNS": "80"}).output
    # classify's summary once broke after "its fault domain and" with room to spare on the line
    lines = [line.strip("│ ").strip() for line in out.splitlines()]
    assert not any(line.endswith("fault domain and") for line in lines), out


def test_events_tail_piped_writes_one_line_per_message(monkeypatch):
    entry = AuditEntry(cluster="c", job_id="7", service="decider", action="restart",
                       detail=json.dumps({"reason": "x" * 200}), idempotency_key="k1",
                       at="2026-12-01T08:00:00Z")

    async def one(url, subject):
        yield "relaunch.event.audit.c.7", entry

    monkeypatch.setattr(cli, "subscribe", one)
    monkeypatch.setattr(cli.client_settings, "nats_url", lambda: "nats://127.0.0.1:1")
    monkeypatch.setattr(cli, "console", Console(width=80, force_terminal=False))
    out = CliRunner().invoke(cli.app, ["events", "tail"]).output
    assert len(out.strip().splitlines()) == 1 and len(out) > 200, out
