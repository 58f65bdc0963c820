"""Text from a job, ready for rich: `shown(value)` for a markup string, printed as plain text.

A job controls its name, comment, log lines, evidence paths, and the summaries and reasons quoted
from them. Printed raw, an escape sequence in one of them drives the terminal and `[bold]` in one
of them is read as rich markup. `shown` passes the value through relaunch.common.display.printable
(control characters written as `\\x1b` and the like) and then escapes rich's markup, so it can go
inside an f-string that also holds relaunch's own markup (docs/security.md, "Text from jobs").
"""

from __future__ import annotations

from rich.markup import escape

from relaunch.common.display import printable


def shown(value: object) -> str:
    """`value` as a markup-safe string with its control characters escaped."""
    return escape(printable(value))
