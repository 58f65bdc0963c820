"""The layers hold (docs/architecture.md, "Layout"): `lint-imports` checks the contracts in
pyproject.toml ([tool.importlinter]); a broken contract fails this test with import-linter's report."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> str:
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: run make setup (requirements-dev.txt installs import-linter)")
    return found


def test_every_import_contract_is_kept():
    out = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"an import contract is broken:\n{out.stdout[-6000:]}\n{out.stderr[-2000:]}"
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("services/detector/src/relaunch/detector/domain/planted.py", "import redis",
     "a service's domain is pure"),
    ("services/decider/src/relaunch/decider/domain/planted.py", "from relaunch.common.policies.model import Policy",
     None),  # a pure module of relaunch.common: allowed
    ("libs/client/src/relaunch/client/planted.py", "import relaunch.decider.domain.policy",
     "the libraries import no service"),
    ("services/api/src/relaunch/api/planted.py", "from relaunch.detector.domain import hangs",
     "services never import each other"),
    ("services/actuator/src/relaunch/actuator/planted.py", "import subprocess",
     "only adapters talk to NATS"),
])
def test_a_planted_violation_breaks_its_contract(tmp_path, module, line, contract):
    """The contracts are not vacuous: on a copy of the sources, one import where it does not belong
    breaks the contract that forbids it."""
    import sysconfig
    for src in [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src")]:
        shutil.copytree(src, tmp_path / src.relative_to(ROOT), ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / module).write_text(line + "\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    paths = [str(p) for p in [*tmp_path.glob("libs/*/src"), *tmp_path.glob("services/*/src")]]
    # -S: the virtual environment's editable installs (.pth files) would add the real sources too.
    env = {"PYTHONPATH": ":".join([*paths, sysconfig.get_path("purelib")]), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-S", _lint_imports(), "--no-cache"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    if contract is None:
        assert out.returncode == 0, out.stdout[-4000:]
        return
    assert out.returncode != 0, out.stdout[-4000:]
    broken = out.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken and Path(module).stem in broken, out.stdout[-4000:]
