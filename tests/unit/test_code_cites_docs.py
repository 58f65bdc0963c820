"""Code cites the project's own docs (docs/), never files outside the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"\b(?:DESIGN|STYLE)\.md\b|\.\./shared/")


def test_no_module_in_libs_or_services_cites_a_file_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted([*ROOT.glob("libs/*/src/**/*.py"), *ROOT.glob("services/*/src/**/*.py")])
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "cite docs/ instead:\n" + "\n".join(found)
