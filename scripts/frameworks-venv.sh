#!/usr/bin/env bash
# The real-framework tier's venv (tests/frameworks): torch (CPU build), transformers, accelerate and
# pytorch-lightning with exact pins from tests/frameworks/constraints.txt, cached OUTSIDE the checkout
# (RELAUNCH_CACHE_DIR, default /var/cache/relaunch) and rebuilt when missing or when the pins change.
# Prints the venv's python. relaunch-common and relaunch-client are installed too (as a user's training
# environment has them, for report_progress and the callbacks); the tests put the checkout's own
# libs/*/src first on PYTHONPATH, so the code under test is the checkout's.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${RELAUNCH_CACHE_DIR:-/var/cache/relaunch}
VENV=${RELAUNCH_FRAMEWORKS_VENV:-$CACHE/frameworks-venv}
REQ=tests/frameworks/requirements.txt
CON=tests/frameworks/constraints.txt
mkdir -p "$(dirname "$VENV")"
# One build at a time per venv: tiers that run side by side (scripts/test_matrix.py) may all want it.
exec 9>"$VENV.lock"
flock 9
stamp=$(cat "$REQ" "$CON" constraints.txt libs/common/pyproject.toml libs/client/pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$VENV/.relaunch-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "[frameworks-venv] building $VENV (torch CPU build, transformers, lightning; a few minutes)" >&2
  rm -rf "$VENV.tmp"
  python3 -m venv "$VENV.tmp"
  # torch's CPU wheel: the local wheel directory where the machine has one, else the CPU index.
  "$VENV.tmp/bin/python" -m pip install -q --disable-pip-version-check -c "$CON" -c constraints.txt -r "$REQ" \
    ./libs/common ./libs/client >&2
  echo "$stamp" > "$VENV.tmp/.relaunch-stamp"
  rm -rf "$VENV"
  mv "$VENV.tmp" "$VENV"
  # a venv's scripts name their interpreter by path: rebuild them for the final place
  sed -i "s#$VENV.tmp#$VENV#g" "$VENV/bin/"* 2>/dev/null || true
fi
echo "$VENV/bin/python"
