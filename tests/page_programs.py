"""The runnable programs of a page of docs/, as they stand: each fenced ```python block that starts
with `# file: NAME` is one program (docs/custom-consumer.md). The end-to-end tier
(tests/e2e/test_custom_consumer.py) and the compose demo (scripts/custom_consumer_demo.py) run them
from here, so what they run is what a reader copies."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
CUSTOM_CONSUMER = DOCS / "custom-consumer.md"
PROGRAM = re.compile(r"^```python\n# file: (\S+)\n(.*?)^```", re.S | re.M)


def programs(page: Path = CUSTOM_CONSUMER) -> dict[str, str]:
    """Every `# file: NAME` block of the page, as it stands: NAME -> the file's text."""
    return {name: "# file: " + name + "\n" + body for name, body in PROGRAM.findall(page.read_text())}


def write(folder: Path, page: Path = CUSTOM_CONSUMER) -> dict[str, Path]:
    """Write each of the page's programs into `folder`: NAME -> its path."""
    out = {}
    for name, text in programs(page).items():
        out[name] = folder / name
        out[name].write_text(text)
    return out
