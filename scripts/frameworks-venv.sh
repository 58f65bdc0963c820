#!/usr/bin/env bash
# The real-framework tier's venv (tests/frameworks): torch (CPU build), transformers, accelerate and
# pytorch-lightning with exact pins from tests/frameworks/constraints.txt, cached OUTSIDE the checkout
# (RELAUNCH_CACHE_DIR, default /var/cache/relaunch) and rebuilt when missing or when the pins change.
# Prints the venv's python. The relaunch client is not installed there: training scripts need none of
# relaunch except relaunch.client's callbacks, which the tests put on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${RELAUNCH_CACHE_DIR:-/var/cache/relaunch}
VENV=${RELAUNCH_FRAMEWORKS_VENV:-$CACHE/frameworks-venv}
REQ=tests/frameworks/requirements.txt
CON=tests/frameworks/constraints.txt
stamp=$(cat "$REQ" "$CON" | sha256sum | cut -c1-16)
if [ "$(cat "$VENV/.relaunch-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "[frameworks-venv] building $VENV (torch CPU build, transformers, lightning; a few minutes)" >&2
  mkdir -p "$(dirname "$VENV")"
  rm -rf "$VENV.tmp"
  python3 -m venv "$VENV.tmp"
  # torch's CPU wheel: the local wheel directory where the machine has one, else the CPU index.
  "$VENV.tmp/bin/python" -m pip install -q --disable-pip-version-check -c "$CON" -r "$REQ" >&2
  echo "$stamp" > "$VENV.tmp/.relaunch-stamp"
  rm -rf "$VENV"
  mv "$VENV.tmp" "$VENV"
  # a venv's scripts name their interpreter by path: rebuild them for the final place
  sed -i "s#$VENV.tmp#$VENV#g" "$VENV/bin/"* 2>/dev/null || true
fi
echo "$VENV/bin/python"
