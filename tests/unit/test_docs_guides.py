"""The operator and user guides match the code: every setting, command, make target, metric, path
and link they mention exists. Docs that drift are worse than none."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import typer
from pydantic_settings import BaseSettings

import relaunch
from relaunch.client.cli import app
from test_metrics_dashboard import relaunch_metrics

REPO = Path(__file__).resolve().parents[2]
GUIDES = [REPO / "docs" / "operator-guide.md", REPO / "docs" / "user-guide.md"]
CODE_DIRS = ("libs", "services", "scripts")


def _code(text: str) -> list[str]:
    """Inline code spans and fenced code blocks: where names and commands are spelled exactly."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S))
    return blocks + inline


def known_settings() -> set[str]:
    for module in pkgutil.walk_packages(relaunch.__path__, "relaunch."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    names: set[str] = set()
    classes = [BaseSettings]
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        prefix = (cls.model_config.get("env_prefix") or "").upper()
        if prefix.startswith("RELAUNCH_"):
            names |= {f"{prefix}{field}".upper() for field in cls.model_fields}
    # Variables read directly (the SDK, the CLI's options, the local stack's scripts).
    for folder in CODE_DIRS:
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and ".venv" not in path.parts:
                names |= set(re.findall(r"RELAUNCH_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    return names


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_setting_named_exists(guide):
    named = set(re.findall(r"RELAUNCH_[A-Z0-9_]*[A-Z0-9]", guide.read_text()))
    assert named, "the guide names no setting"
    assert named - known_settings() == set()


def _resolve(words: list[str]) -> tuple[object, list[str], int]:
    cmd = typer.main.get_command(app)
    depth = 0
    for i, word in enumerate(words):
        if word in getattr(cmd, "commands", {}):  # typer may bring its own click: no isinstance
            cmd, depth = cmd.commands[word], depth + 1
        else:
            return cmd, words[i:], depth
    return cmd, [], depth


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_relaunch_command_and_option_exists(guide):
    without_comments = [re.sub(r"(?:^|\s)#.*$", "", code, flags=re.M) for code in _code(guide.read_text())]
    calls = [m.group(1).split() for code in without_comments
             for m in re.finditer(r"(?:^|[\s/])relaunch ([a-z][^\n|]*)", code, re.M)]
    assert calls, "the guide shows no relaunch command"
    for words in calls:
        cmd, rest, depth = _resolve(words)
        assert depth >= 1, f"`relaunch {' '.join(words)}`: no such command"
        assert not (hasattr(cmd, "commands") and rest and not rest[0].startswith("-")), (
            f"`relaunch {' '.join(words)}`: no command {rest[0]!r}")
        options = {opt for p in cmd.params for opt in p.opts + p.secondary_opts}
        for word in rest:
            if word.startswith("--"):
                assert word.split("=")[0] in options, f"`relaunch {' '.join(words)}`: {word} is not an option"


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_make_targets_metrics_paths_and_links_exist(guide):
    text = guide.read_text()
    makefile = (REPO / "Makefile").read_text()
    for target in re.findall(r"`make ([a-z-]+)`", text):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"
    metrics = {family for family, _ in relaunch_metrics().values()}
    for name in re.findall(r"\b(relaunch_[a-z_]+?)(?:_total)?\b(?!\.)", text):
        assert name in metrics or name + "_total" in relaunch_metrics(), f"metric {name}"
    for code in _code(text):
        if re.fullmatch(r"(?:deploy|docs|scripts|services|libs|examples)/[\w./-]+", code):
            assert (REPO / code).exists(), code
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (guide.parent / target).exists(), f"broken link {target}"


def test_the_guides_and_the_events_reference_are_linked_from_the_readme_and_the_docs_index():
    readme = (REPO / "README.md").read_text()
    index = (REPO / "docs" / "README.md").read_text()
    for doc in ("operator-guide.md", "user-guide.md", "events.md"):
        assert f"(docs/{doc})" in readme and f"({doc})" in index, doc
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", index):
        assert (REPO / "docs" / target).exists(), f"docs/README.md links {target}"
