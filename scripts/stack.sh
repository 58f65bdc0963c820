#!/usr/bin/env bash
# The local relaunch stack: NATS (JetStream), Redis, PostgreSQL, munge, a 4-node Slurm cluster
# (slurmctld + slurmd -N node1..node4) and the relaunch services, on loopback, state under $RUN.
#
#   scripts/stack.sh up | down | infra-up | services-up | services-down | status
#
# Environment: RELAUNCH_RUN_DIR (default .run), RELAUNCH_PORT_BASE (default 14000),
# RELAUNCH_CLUSTER (default local). Ports are PORT_BASE + fixed offsets (see below), so a second
# stack (the tests use .run/test and 24000) never collides with the first. Safe to run twice.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
RUN=$(realpath -m "${RELAUNCH_RUN_DIR:-.run}")
B=${RELAUNCH_PORT_BASE:-14000}
CLUSTER=${RELAUNCH_CLUSTER:-local}
PY=$REPO/.venv/bin/python

NATS_PORT=$((B + 222)); NATS_MON=$((B + 822)); REDIS_PORT=$((B + 379)); PG_PORT=$((B + 432))
CTLD_PORT=$((B + 817)); SLURMD_PORT=$((B + 818)); NODE_PORT0=$((B + 900)); API_PORT=$((B + 80))
HEALTH_DETECTOR=$((B + 91)); HEALTH_DECIDER=$((B + 92)); HEALTH_ACTUATOR=$((B + 93)); HEALTH_PROBE0=$((B + 93))
HEALTH_WATCHDOG=$((B + 98))
NODES=(node1 node2 node3 node4)

say() { printf '\033[1m[stack]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[stack] %s\033[0m\n' "$*" >&2; exit 1; }

alive() {  # pid file -> running and not a zombie
  local pid; pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"
}

wait_for() {  # description, timeout seconds, command...
  local what=$1 timeout=$2; shift 2
  local end=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "$what did not come up within ${timeout}s (logs: $RUN/log/)"
    sleep 0.1
  done
}

port_free() {  # port -> fails, saying who to ask, when something already listens there
  if "$PY" -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', int(sys.argv[1]))) != 0)" "$1"; then
    die "port $1 is already in use by another process (a stack whose $RUN was deleted?). Stop it, or pick other ports with RELAUNCH_PORT_BASE."
  fi
}

http_ok() { "$PY" -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1"; }

stop_pidfile() {  # pid file [name]
  local f=$1 pid
  alive "$f" || { rm -f "$f"; return 0; }
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$f" || break; sleep 0.1; done
  alive "$f" && kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

# PostgreSQL refuses to run as root, so as root it runs as the postgres user, which must be able to
# reach its data folder: when the checkout is not reachable by that user, the data lives in /var/tmp.
pg_dir() {
  if [ -f "$RUN/pgdir" ]; then cat "$RUN/pgdir"; return; fi
  local dir=$RUN/pg
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$RUN" 2>/dev/null; then
    dir=/var/tmp/relaunch-pg-$(printf '%s' "$RUN" | sha1sum | cut -c1-12)
    rm -rf "$dir"  # left by an earlier stack in a run folder that has since been wiped
  fi
  echo "$dir" > "$RUN/pgdir"; echo "$dir"
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

write_env() {
  cat > "$RUN/env" <<ENV
# relaunch local stack ($RUN): source this file to use sbatch and the relaunch CLI against it.
export SLURM_CONF=$RUN/slurm/slurm.conf
export RELAUNCH_NATS_URL=nats://127.0.0.1:$NATS_PORT
export RELAUNCH_DATABASE_URL=postgresql://postgres@127.0.0.1:$PG_PORT/relaunch
export RELAUNCH_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export RELAUNCH_API_URL=http://127.0.0.1:$API_PORT
export RELAUNCH_CLUSTER=$CLUSTER
export RELAUNCH_RUN_DIR=$RUN
export RELAUNCH_PORT_BASE=$B
export RELAUNCH_API_TOKEN_FILE=$RUN/api-token
export PATH=$REPO/.venv/bin:\$PATH
ENV
}

start_nats() {
  alive "$RUN/pids/nats.pid" && return 0
  mkdir -p "$RUN/nats"; port_free "$NATS_PORT"
  nohup "$REPO/.venv/bin/nats-server" -js -sd "$RUN/nats" -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MON" \
    >>"$RUN/log/nats.log" 2>&1 &
  echo $! > "$RUN/pids/nats.pid"
  wait_for "NATS" 15 http_ok "http://127.0.0.1:$NATS_MON/healthz?js-enabled-only=true"
}

start_redis() {
  alive "$RUN/pids/redis.pid" && return 0
  mkdir -p "$RUN/redis"; port_free "$REDIS_PORT"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$RUN/pids/redis.pid" --logfile "$RUN/log/redis.log" --dir "$RUN/redis" >/dev/null
  wait_for "Redis" 15 redis-cli -p "$REDIS_PORT" ping
}

start_postgres() {
  local bin; bin=$(pg_bin); [ -n "$bin" ] || die "PostgreSQL is not installed (run make setup)"
  local pgdir; pgdir=$(pg_dir); local data=$pgdir/data
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$pgdir"; [ "$(id -u)" = 0 ] && chown postgres:postgres "$pgdir"
    as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$RUN/log/initdb.log" 2>&1 \
      || die "initdb failed: see $RUN/log/initdb.log"
  fi
  if ! as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    port_free "$PG_PORT"
    as_pg "$bin/pg_ctl" -D "$data" -l "$pgdir/postgres.log" -w -t 30 -o \
      "-p $PG_PORT -k $pgdir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null || die "PostgreSQL did not start: see $pgdir/postgres.log"
  fi
  as_pg "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='relaunch'" \
    | grep -q 1 || as_pg "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres relaunch
}

write_slurm_conf() {
  local S=$RUN/slurm user; user=$(id -un)
  mkdir -p "$S/state" "$S/log" "$S/munge" "${NODES[@]/#/$S/spool/}"
  cat > "$S/slurm.conf" <<CONF
# Generated by scripts/stack.sh: a 4-node Slurm cluster on one machine (slurmd -N nodeX).
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$RUN/pids/slurmctld.pid
SlurmdPidFile=$RUN/pids/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$S/log/jobcomp.txt
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=node[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((NODE_PORT0 + 1))-$((NODE_PORT0 + 4))] CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP
CONF
}

start_slurm() {
  local S=$RUN/slurm
  export SLURM_CONF=$S/slurm.conf
  write_slurm_conf
  if ! alive "$RUN/pids/munged.pid"; then
    [ -f "$S/munge/munge.key" ] || { dd if=/dev/urandom bs=1 count=1024 of="$S/munge/munge.key" 2>/dev/null; }
    chmod 700 "$S/munge"; chmod 600 "$S/munge/munge.key"
    munged -f --socket="$S/munge/munge.socket" --key-file="$S/munge/munge.key" --log-file="$RUN/log/munged.log" \
      --pid-file="$RUN/pids/munged.pid" --seed-file="$S/munge/munged.seed" || die "munged did not start"
    wait_for "munge" 10 bash -c "munge -S '$S/munge/munge.socket' -n | unmunge -S '$S/munge/munge.socket'"
  fi
  alive "$RUN/pids/slurmctld.pid" || { port_free "$CTLD_PORT"; slurmctld; } || die "slurmctld did not start: see $S/log/slurmctld.log"
  wait_for "slurmctld" 20 bash -c "scontrol ping | grep -q UP"
  for n in "${NODES[@]}"; do
    alive "$RUN/pids/slurmd-$n.pid" || slurmd -N "$n" || die "slurmd -N $n did not start: see $S/log/slurmd-$n.log"
  done
  wait_for "4 idle Slurm nodes" 30 bash -c \
    "[ \$(sinfo -h -N -o '%N %t' | grep -cvE 'down|unk|drain|fail') -ge 4 ]"
}

start_service() {  # name, health url, command...
  local name=$1 url=$2; shift 2
  alive "$RUN/pids/$name.pid" && return 0
  ( set -a; . "$RUN/env"; set +a; exec setsid nohup "$@" >>"$RUN/log/$name.log" 2>&1 ) &
  echo $! > "$RUN/pids/$name.pid"
  STARTED+=("$name|$url")
}

services_up() {
  [ -f "$RUN/env" ] || die "infra is not up: run scripts/stack.sh infra-up first"
  STARTED=()
  export RELAUNCH_DETECTOR_HEALTH_PORT=$HEALTH_DETECTOR RELAUNCH_DECIDER_HEALTH_PORT=$HEALTH_DECIDER \
         RELAUNCH_ACTUATOR_HEALTH_PORT=$HEALTH_ACTUATOR RELAUNCH_API_PORT=$API_PORT
  start_service decider "http://127.0.0.1:$HEALTH_DECIDER/healthz" "$PY" -m relaunch.decider
  start_service detector "http://127.0.0.1:$HEALTH_DETECTOR/healthz" "$PY" -m relaunch.detector
  start_service actuator "http://127.0.0.1:$HEALTH_ACTUATOR/healthz" "$PY" -m relaunch.actuator
  RELAUNCH_WATCHDOG_HEALTH_PORT=$HEALTH_WATCHDOG start_service watchdog "http://127.0.0.1:$HEALTH_WATCHDOG/healthz" \
    "$PY" -m relaunch.actuator.watchdog
  start_service api "http://127.0.0.1:$API_PORT/healthz" "$PY" -m relaunch.api
  local i=0
  for n in "${NODES[@]}"; do
    i=$((i + 1))
    RELAUNCH_PROBE_HEALTH_PORT=$((HEALTH_PROBE0 + i)) start_service "gpu-probe-$n" \
      "http://127.0.0.1:$((HEALTH_PROBE0 + i))/healthz" "$PY" -m relaunch.gpu_probe --node "$n"
  done
  for entry in "${STARTED[@]}"; do
    wait_for "${entry%%|*} (log: $RUN/log/${entry%%|*}.log)" 60 http_ok "${entry#*|}"
  done
}

services_down() {
  for f in "$RUN"/pids/{actuator,watchdog,detector,decider,api,gpu-probe-*}.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
  return 0
}

infra_up() {
  mkdir -p "$RUN/log" "$RUN/pids" "$RUN/jobs"
  # The bearer token for state-changing API calls (relaunch jobs mode ... --token-file $RUN/api-token).
  [ -s "$RUN/api-token" ] || { (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RUN/api-token"); }
  write_env
  start_nats; start_redis; start_postgres; start_slurm
}

down() {
  [ -d "$RUN/pids" ] || { say "nothing to stop in $RUN"; return 0; }
  services_down
  export SLURM_CONF=$RUN/slurm/slurm.conf
  for f in "$RUN"/pids/slurmd-*.pid "$RUN/pids/slurmctld.pid" "$RUN/pids/munged.pid" "$RUN/pids/redis.pid" \
           "$RUN/pids/nats.pid"; do
    [ -e "$f" ] && stop_pidfile "$f"
  done
  local pgdata; pgdata=$(pg_dir)/data
  if [ -f "$pgdata/PG_VERSION" ] && as_pg "$(pg_bin)/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
    as_pg "$(pg_bin)/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null
  fi
  say "stopped the stack in $RUN"
}

status() {
  for f in "$RUN"/pids/*.pid; do
    [ -e "$f" ] || continue
    if alive "$f"; then echo "up   $(basename "$f" .pid)"; else echo "DOWN $(basename "$f" .pid)"; fi
  done
}

[ -x "$PY" ] || die "no .venv: run make setup first"
case "${1:-}" in
  up) infra_up; services_up; say "stack up in $RUN (cluster $CLUSTER). Use it with: source $RUN/env" ;;
  infra-up) infra_up; say "infrastructure up in $RUN" ;;
  services-up) services_up ;;
  services-down) services_down ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|infra-up|services-up|services-down|status" >&2; exit 2 ;;
esac
