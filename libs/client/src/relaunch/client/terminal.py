"""Text from a job, ready for rich: `shown(value)` for a markup string, printed as plain text.

A job controls its name, comment, log lines, evidence paths, and the summaries and reasons quoted
from them. Printed raw, an escape sequence in one of them drives the terminal and `[bold]` in one
of them is read as rich markup. `shown` passes the value through relaunch.common.display.printable
(control characters written as `\\x1b` and the like) and then escapes rich's markup, so it can go
inside an f-string that also holds relaunch's own markup (docs/security.md, "Text from jobs").
"""

from __future__ import annotations

import inspect

import typer
from rich.markup import escape

from relaunch.common.display import printable


def shown(value: object) -> str:
    """`value` as a markup-safe string with its control characters escaped."""
    return escape(printable(value))


def unwrap_help(app: typer.Typer) -> None:
    """Each paragraph of every command's help on one line, which rich then wraps to the terminal.

    Typer (0.29, rich markup mode) keeps the line breaks of a docstring, so `relaunch --help` broke
    sentences mid-line where the source happened to wrap them. Paragraphs (blank-line separated) and
    indented lines (examples) are kept as written."""
    # Where each help came from stays as it was (typer ranks an explicit help= above a docstring).
    callback = app.registered_callback
    for info in [*app.registered_commands, *([callback] if callback is not None else [])]:
        if _text(info.help):
            info.help = _paragraphs(_text(info.help))
        elif info.callback is not None and info.callback.__doc__:
            info.callback.__doc__ = _paragraphs(info.callback.__doc__)
    if _text(app.info.help):
        app.info.help = _paragraphs(_text(app.info.help))
    for group in app.registered_groups:
        if _text(group.help):
            group.help = _paragraphs(_text(group.help))
        if group.typer_instance is not None:
            unwrap_help(group.typer_instance)


def _text(value: object) -> str:
    value = getattr(value, "value", value)  # typer's Default(...) placeholders
    return value if isinstance(value, str) else ""


def _paragraphs(text: str) -> str:
    out = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines = paragraph.split("\n")
        if paragraph.startswith("\b") or any(line.startswith((" ", "\t")) for line in lines[1:]):
            out.append(paragraph)  # laid out on purpose (an example, a list)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)
