#!/usr/bin/env bash
# The local relaunch stack: NATS (JetStream), Redis, PostgreSQL, munge, a 4-node Slurm cluster
# (slurmctld + slurmd -N node1..node4) with job accounting (slurmdbd on a private MariaDB, so `sacct`
# keeps every attempt after slurmctld forgets the job) and the relaunch services, on loopback, state under $RUN.
#
#   scripts/stack.sh up | down | infra-up | services-up | services-down | status
#   scripts/stack.sh stop nats|redis|postgres|slurmctld|slurmdbd|slurmrestd   (one server, for fault tests; infra-up restarts it)
#   scripts/stack.sh cut NODE | heal NODE      (contract: the node's link down / up again; hosts topology;
#                                               several nodes: one right after another, each of these six)
#   scripts/stack.sh freeze NODE | thaw NODE   (every process of that host stopped / continued)
#   scripts/stack.sh kill NODE | revive NODE   (every process of that host killed / its slurmd and probe started)
#   scripts/stack.sh nats-kill N | nats-start N (NATS cluster: server N killed with SIGKILL / started again)
#
# RELAUNCH_TOPOLOGY=hosts (root only; docs/reliability.md "Faults between hosts"): each Slurm node (its
# slurmd, its gpu-probe and the job processes it runs) lives in a network namespace of its own, joined
# to the stack's own bridge by a veth pair, with addresses from 10.213.X.0/24 (X from the port base);
# slurmctld, NATS and the services stay in the host's namespace on the bridge address 10.213.X.1. The
# default (local) keeps everything on loopback.
#
# Environment: RELAUNCH_RUN_DIR (default .run), RELAUNCH_PORT_BASE (default 14000),
# RELAUNCH_CLUSTER (default local), RELAUNCH_SLURM (the Slurm release: empty for the host's
# packages, or 24.11 / 26.05, run from a release root that scripts/slurm-root.sh builds; `make up
# SLURM=24.11` sets it; docs/slurm-versions.md), RELAUNCH_SLURM_API (cli, the default, or rest: the
# cluster also takes JWTs (auth/jwt), slurmrestd runs from the same release on loopback, and the
# actuator and watchdog talk to it; `make up SLURM=24.11 SLURM_API=rest`), RELAUNCH_NATS_SERVERS (1, the
# default, or 3: a NATS cluster whose streams and key-value buckets have 3 replicas; in the hosts
# topology each server has a network namespace of its own; `make up NATS_SERVERS=3`). Ports are PORT_BASE + fixed offsets (see below), so a second
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
MARIADB_PORT=$((B + 306)); DBD_PORT=$((B + 819)); REST_PORT=$((B + 820))
# How long slurmctld keeps a finished job (then only sacct knows it); Slurm's default is 300 s.
MIN_JOB_AGE=${RELAUNCH_SLURM_MIN_JOB_AGE:-300}
# SchedulerParameters of the cluster; empty (the default): Slurm's own. The test stacks set
# batch_sched_delay=1 (docs/operator-guide.md, "Faster restarts"), so that jobs start and restart within a
# second of being ready instead of waiting up to 3 s for Slurm's next scheduling pass.
SCHED_PARAMS=${RELAUNCH_SLURM_SCHEDULER_PARAMETERS:-}
HEALTH_DETECTOR=$((B + 91)); HEALTH_DECIDER=$((B + 92)); HEALTH_ACTUATOR=$((B + 93)); HEALTH_PROBE0=$((B + 93))
HEALTH_WATCHDOG=$((B + 98)); HEALTH_NOTIFIER=$((B + 99))
NODES=(node1 node2 node3 node4)
# Unset: the release this run folder was made with (so that infra-up after a fault test keeps it).
SLURM_RELEASE=${RELAUNCH_SLURM:-$(cat "$RUN/slurm/release" 2>/dev/null || true)}
[ "$SLURM_RELEASE" = host ] && SLURM_RELEASE=""
case "$SLURM_RELEASE" in ""|24.11|26.05) ;; 22.05)
  SLURM_RELEASE=""  # the host's packages (Debian 12)
  command -v slurmctld >/dev/null && slurmctld -V | grep -q ' 22\.05\.' \
    || { echo "[stack] SLURM=22.05 is the host's Slurm (Debian 12 packages); this host has $(slurmctld -V 2>/dev/null || echo none)" >&2; exit 1; } ;;
  *) echo "[stack] unknown Slurm release '$SLURM_RELEASE': use 22.05 (the host's), 24.11 or 26.05" >&2; exit 2 ;;
esac
SLURM_BIN=$RUN/slurm/bin
# How the actuator and watchdog reach Slurm: cli (its commands) or rest (slurmrestd, JWT). Unset: what
# this run folder was started with. The infrastructure starts slurmrestd when it is rest.
SLURM_API=${RELAUNCH_SLURM_API:-$(cat "$RUN/slurm/api" 2>/dev/null || echo cli)}
case "$SLURM_API" in cli|rest) ;; *) echo "[stack] unknown SLURM_API '$SLURM_API': use cli or rest" >&2; exit 2 ;; esac
export RELAUNCH_SLURM_API=$SLURM_API  # resolved (an empty one would reach every service as an invalid setting)
JWT_KEY=$RUN/slurm/jwt/jwt_hs256.key
REST_TOKEN=$RUN/slurm/jwt/relaunch.token

# The topology this run folder was made with, unless asked for (a restart after a fault test keeps it).
TOPOLOGY=${RELAUNCH_TOPOLOGY:-$(cat "$RUN/topology" 2>/dev/null || echo local)}
case "$TOPOLOGY" in local|hosts) ;; *) echo "[stack] unknown RELAUNCH_TOPOLOGY '$TOPOLOGY': local or hosts" >&2; exit 2 ;; esac
NETX=$(( (B / 100) % 250 + 1 ))          # 14000 -> 141: the stack's own 10.213.141.0/24
HOSTNET=10.213.$NETX
BRIDGE=rl${NETX}br
if [ "$TOPOLOGY" = hosts ]; then BUS_ADDR=$HOSTNET.1; else BUS_ADDR=127.0.0.1; fi
ns_of() { echo "rl$NETX-$1"; }           # node2 -> rl141-node2 (the node's network namespace)
veth_of() { echo "rl${NETX}v${1#node}"; }  # node2 -> rl141v2 (its link, the host's end)
node_addr() { echo "$HOSTNET.$((10 + ${1#node}))"; }  # node2 -> 10.213.141.12

# NATS: one server, or a 3-server cluster (routes between them, streams and buckets R3). Unset: what
# this run folder was made with. Server N (1..3) listens on NATS_PORT+N-1 (monitoring NATS_MON+N-1,
# routes B+224+N); in the hosts topology each server lives in a namespace of its own at .200+N.
NATS_SERVERS=${RELAUNCH_NATS_SERVERS:-$(cat "$RUN/nats/servers" 2>/dev/null || echo 1)}
case "$NATS_SERVERS" in 1|3) ;; *) echo "[stack] RELAUNCH_NATS_SERVERS must be 1 or 3, not '$NATS_SERVERS'" >&2; exit 2 ;; esac
nats_ids() { seq 1 "$NATS_SERVERS"; }
nats_in_ns() { [ "$NATS_SERVERS" != 1 ] && [ "$TOPOLOGY" = hosts ]; }
nats_addr() { if nats_in_ns; then echo "$HOSTNET.$((200 + $1))"; elif [ "$NATS_SERVERS" = 1 ]; then echo "$BUS_ADDR"; else echo 127.0.0.1; fi; }
nats_mon_addr() { if nats_in_ns; then nats_addr "$1"; else echo 127.0.0.1; fi; }
nats_port() { echo $((NATS_PORT + $1 - 1)); }
nats_mon() { echo $((NATS_MON + $1 - 1)); }
nats_route_port() { echo $((B + 224 + $1)); }
nats_ns() { echo "rl$NETX-nats$1"; }
nats_veth() { echo "rl${NETX}n$1"; }
nats_pidfile() { if [ "$NATS_SERVERS" = 1 ]; then echo "$RUN/pids/nats.pid"; else echo "$RUN/pids/nats-$1.pid"; fi; }
nats_urls() {  # every server's client URL, comma-separated (RELAUNCH_NATS_URL)
  local i urls=()
  for i in $(nats_ids); do urls+=("nats://$(nats_addr "$i"):$(nats_port "$i")"); done
  (IFS=,; echo "${urls[*]}")
}

say() { printf '\033[1m[stack]\033[0m %s\n' "$*"; }
die() { printf '\033[31m[stack] %s\033[0m\n' "$*" >&2; exit 1; }

alive() {  # pid file -> running and not a zombie
  local pid; pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status"
}

slurm_alive() {  # slurmctld | slurmd-<node>: running; its pid file written again when it had lost track of it
  # Slurm 23.11 and later: `scontrol reconfigure` replaces slurmctld and every slurmd with new processes,
  # which write their pid files. One CI run (24.11, tests/e2e/test_sacct_history.py) found slurmctld's
  # stale afterwards while the new process served this stack's port: infra-up then took slurmctld for
  # down, refused its busy port, and `down` left it running. The daemon listening on this stack's port
  # for it, with this stack's slurm.conf (and, for a slurmd, its node name), is this stack's own.
  local f=$RUN/pids/$1.pid port node="" pid
  alive "$f" && return 0
  case $1 in
    slurmctld) port=$CTLD_PORT ;;
    slurmd-node*) node=${1#slurmd-}; port=$((NODE_PORT0 + ${node#node})) ;;
    *) return 1 ;;
  esac
  command -v ss >/dev/null || return 1  # (a slurmd in the hosts topology listens in its namespace: not seen)
  for pid in $(ss -ltnpH "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
    grep -q slurmscriptd "/proc/$pid/cmdline" 2>/dev/null && continue
    [ -z "$node" ] || tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$node" || continue
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$RUN/slurm/slurm.conf" || continue
    mkdir -p "$RUN/pids" && echo "$pid" > "$f"
    say "$1 (pid $pid) serves this stack's port but its pid file had lost it (a reconfigure replaced the process): pid file written again"
    return 0
  done
  return 1
}

# A wait ends as soon as its server answers, so its limit costs nothing on a quiet machine; on a loaded one
# (the test matrix starts four stacks at once on two cores, beside CPU-bound neighbours: issue 38) a server's
# first start takes several times as long. RELAUNCH_STACK_WAIT_SCALE multiplies every limit (default 4).
WAIT_SCALE=${RELAUNCH_STACK_WAIT_SCALE:-4}
wait_for() {  # description, timeout seconds (on a quiet machine), command...
  local what=$1 timeout=$(($2 * WAIT_SCALE)); shift 2
  local end=$((SECONDS + timeout)) last=""
  until last=$("$@" 2>&1); do
    [ $SECONDS -lt $end ] || die "$what did not come up within ${timeout}s (logs: $RUN/log/); its last check said: $(printf '%s' "$last" | tail -3)"
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
  kill "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true  # a frozen host (stack.sh freeze)
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

# Custom consumers of EVENTS or ADVICE (docs/custom-consumer.md): the stack's declaration, a JSON list in
# $RUN/custom-consumers.json (RELAUNCH_CUSTOM_CONSUMERS replaces it). NATS gets a user for each, with
# rights on its own durable only (relaunch.common.natsauth), the admin creates that durable, and
# $RUN/consumers/<name>.env says how to connect as it. By default one example: the page's webhook consumer.
EXAMPLE_CONSUMERS='[{"name": "advice-webhook", "stream": "ADVICE", "filterSubjects": ["relaunch.advice.>"], "durable": "advice-webhook", "ack": true}]'
custom_consumers() {  # the declaration (JSON), saved in the run folder at the first start
  if [ -n "${RELAUNCH_CUSTOM_CONSUMERS:-}" ]; then echo "$RELAUNCH_CUSTOM_CONSUMERS" > "$RUN/custom-consumers.json"
  elif [ ! -s "$RUN/custom-consumers.json" ]; then echo "$EXAMPLE_CONSUMERS" > "$RUN/custom-consumers.json"; fi
  cat "$RUN/custom-consumers.json"
}

write_consumer_envs() {  # $RUN/consumers/<name>.env: one per declared custom consumer
  local name
  rm -rf "$RUN/consumers"; mkdir -p "$RUN/consumers"
  for name in $(RELAUNCH_CUSTOM_CONSUMERS=$(custom_consumers) "$PY" -c \
      'from relaunch.common.settings import CommonSettings; print(*(c.name for c in CommonSettings().custom_consumers))'); do
    cat > "$RUN/consumers/$name.env" <<ENV
# Custom consumer $name ($RUN/custom-consumers.json; docs/custom-consumer.md): source this file, then run it.
export RELAUNCH_NATS_URL=$(nats_urls)
export RELAUNCH_CLUSTER=$CLUSTER
export RELAUNCH_NATS_USER=$name
export RELAUNCH_NATS_PASSWORD_FILE=$RUN/creds/$name.pass
export PATH=$REPO/.venv/bin:\$PATH
ENV
  done
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

write_env() {
  cat > "$RUN/env" <<ENV
# relaunch local stack ($RUN): source this file to use sbatch and the relaunch CLI against it.
export SLURM_CONF=$RUN/slurm/slurm.conf
export RELAUNCH_NATS_URL=$(nats_urls)
export RELAUNCH_NATS_REPLICAS=$NATS_SERVERS
export RELAUNCH_DATABASE_URL=postgresql://postgres@127.0.0.1:$PG_PORT/relaunch
export RELAUNCH_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export RELAUNCH_API_URL=http://127.0.0.1:$API_PORT
export RELAUNCH_CLUSTER=$CLUSTER
export RELAUNCH_RUN_DIR=$RUN
export RELAUNCH_PORT_BASE=$B
export RELAUNCH_API_TOKEN_FILE=$RUN/api-token
# NATS user of the CLI and the SDK (progress, events tail); services get their own.
export RELAUNCH_NATS_USER=cli
export RELAUNCH_NATS_PASSWORD_FILE=$RUN/creds/cli.pass
# relaunch inject (demo faults) connects as the operator user: cli may not (docs/security.md, "Who may inject").
export RELAUNCH_INJECT_NATS_PASSWORD_FILE=$RUN/creds/operator.pass
export RELAUNCH_SLURM=${SLURM_RELEASE:-host}
export RELAUNCH_SLURM_API=$SLURM_API
# Custom consumers (declared in $RUN/custom-consumers.json): each has its own NATS user; connect as it
# with: source $RUN/consumers/<name>.env (docs/custom-consumer.md).
ENV
  if [ "$SLURM_API" = rest ]; then cat >> "$RUN/env" <<ENV
# slurmrestd of this stack (docs/slurm-versions.md, "Through slurmrestd"); the token is in the file only.
export RELAUNCH_SLURMRESTD_URL=http://127.0.0.1:$REST_PORT
export RELAUNCH_SLURMRESTD_TOKEN_FILE=$REST_TOKEN
# Requeue has no endpoint before Slurm 26.05: there, that one step runs scontrol (this host has it).
export RELAUNCH_SLURMRESTD_CLI_FALLBACK=true
ENV
  fi
  cat >> "$RUN/env" <<ENV
export PATH=${SLURM_RELEASE:+$SLURM_BIN:}$REPO/.venv/bin:\$PATH
ENV
}

# NATS runs with one user per service and subject permissions (relaunch.common.natsauth,
# docs/security.md). Passwords live in $RUN/creds/<user>.pass (mode 600) and in the server config
# (mode 600): never on a command line.
write_nats_conf() {
  mkdir -p "$RUN/nats"
  echo "$NATS_SERVERS" > "$RUN/nats/servers"
  (umask 077
   RELAUNCH_CUSTOM_CONSUMERS=$(custom_consumers) "$PY" -m relaunch.common.natsauth config --creds "$RUN/creds" --cluster "$CLUSTER" \
     --nodes "$(IFS=,; echo "${NODES[*]}")" > "$RUN/nats/auth.conf"
   if [ "$NATS_SERVERS" = 1 ]; then
     cat > "$RUN/nats/nats.conf" <<CONF
# Generated by scripts/stack.sh.
listen: "$BUS_ADDR:$NATS_PORT"
http: "127.0.0.1:$NATS_MON"
jetstream { store_dir: "$RUN/nats" }
include "auth.conf"
CONF
   else
     local i j routes
     for i in $(nats_ids); do
       routes=""
       for j in $(nats_ids); do
         [ "$j" = "$i" ] || routes+="    \"nats-route://$(nats_addr "$j"):$(nats_route_port "$j")\"\n"
       done
       mkdir -p "$RUN/nats/n$i"
       cat > "$RUN/nats/n$i.conf" <<CONF
# Generated by scripts/stack.sh: server $i of a $NATS_SERVERS-server cluster (docs/operator-guide.md, "A NATS cluster").
server_name: n$i
listen: "$(nats_addr "$i"):$(nats_port "$i")"
http: "$(nats_mon_addr "$i"):$(nats_mon "$i")"
jetstream { store_dir: "$RUN/nats/n$i" }
cluster {
  name: "relaunch-$CLUSTER"
  listen: "$(nats_addr "$i"):$(nats_route_port "$i")"
  # Clients use the URLs they are given (RELAUNCH_NATS_URL), not addresses the servers gossip.
  no_advertise: true
  routes: [
$(printf "$routes")
  ]
}
include "auth.conf"
CONF
     done
   fi
  ) || die "could not write the NATS config"
}

nats_admin() {  # command... run as the NATS admin user (stream setup)
  RELAUNCH_NATS_URL=$(nats_urls) RELAUNCH_NATS_REPLICAS=$NATS_SERVERS RELAUNCH_NATS_USER=admin \
    RELAUNCH_NATS_PASSWORD_FILE="$RUN/creds/admin.pass" "$@"
}

start_nats_server() {  # N: one server of the cluster (or the single one, N=1), if it is not running
  local i=$1 pidfile conf log pre=()
  pidfile=$(nats_pidfile "$i")
  alive "$pidfile" && return 0
  if [ "$NATS_SERVERS" = 1 ]; then conf=$RUN/nats/nats.conf; log=$RUN/log/nats.log; else conf=$RUN/nats/n$i.conf; log=$RUN/log/nats-$i.log; fi
  if nats_in_ns; then pre=(nsenter --net="/run/netns/$(nats_ns "$i")"); else port_free "$(nats_port "$i")"; fi
  nohup "${pre[@]}" "$REPO/.venv/bin/nats-server" -c "$conf" >>"$log" 2>&1 &
  echo $! > "$pidfile"
}

nats_healthy() {  # N: the server answers, and in a cluster its JetStream is current (meta leader known)
  local q="?js-enabled-only=true"; [ "$NATS_SERVERS" = 1 ] || q=""
  http_ok "http://$(nats_mon_addr "$1"):$(nats_mon "$1")/healthz$q"
}

start_nats() {
  local i fresh=0
  for i in $(nats_ids); do alive "$(nats_pidfile "$i")" || fresh=1; done
  [ "$fresh" = 1 ] || return 0
  write_nats_conf
  for i in $(nats_ids); do start_nats_server "$i"; done
  for i in $(nats_ids); do wait_for "NATS server $i" 60 nats_healthy "$i"; done
  RELAUNCH_CUSTOM_CONSUMERS=$(custom_consumers) nats_admin "$PY" -m relaunch.common.natsauth setup >>"$RUN/log/nats-setup.log" 2>&1 \
    || die "creating the NATS streams failed: see $RUN/log/nats-setup.log"
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

# Job accounting is on when slurmdbd and MariaDB are installed, unless RELAUNCH_SLURM_ACCOUNTING=0.
have_accounting() {
  [ "${RELAUNCH_SLURM_ACCOUNTING:-1}" != 0 ] && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null \
    && command -v mariadb-install-db >/dev/null
}

# --- slurmrestd (RELAUNCH_SLURM_API=rest; docs/slurm-versions.md, "Through slurmrestd") ----------
# slurmctld and slurmdbd also accept JWTs signed with a key in the run folder (auth/jwt beside munge);
# slurmrestd runs from the same release, as an unprivileged user (recent releases refuse root and
# SlurmUser), on loopback, and forwards each request's token. The actuator's token is minted by
# `scontrol token` straight into a 0600 file: never on a command line, in the environment or a log.
REST_UID=65534  # nobody/nogroup in every Debian root; by number: 26.05's slurmrestd does not resolve the name
REST_TOKEN_LIFESPAN=${RELAUNCH_SLURMRESTD_TOKEN_LIFESPAN:-2592000}
jwt_conf() {
  [ "$SLURM_API" = rest ] || return 0
  printf 'AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=%s\n' "$JWT_KEY"
}

make_jwt_key() {
  [ "$SLURM_API" = rest ] || return 0
  mkdir -p "$(dirname "$JWT_KEY")"; chmod 700 "$(dirname "$JWT_KEY")"
  [ -s "$JWT_KEY" ] || { (umask 077; head -c 32 /dev/urandom > "$JWT_KEY"); }
  chmod 600 "$JWT_KEY"
}

rest_ok() { "$PY" -c "import sys,urllib.request,urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError: pass" "http://127.0.0.1:$REST_PORT/openapi/v3"; }

start_slurmrestd() {
  [ "$SLURM_API" = rest ] || return 0
  if ! alive "$RUN/pids/slurmrestd.pid"; then
    port_free "$REST_PORT"
    # SLURM_JWT=daemon: slurmrestd takes each client's token and forwards it (rest_auth/jwt).
    ( export SLURM_JWT=daemon; exec setsid nohup slurmrestd -u "$REST_UID" -g "$REST_UID" -a rest_auth/jwt "127.0.0.1:$REST_PORT" >>"$RUN/log/slurmrestd.log" 2>&1 ) &
    echo $! > "$RUN/pids/slurmrestd.pid"
    wait_for "slurmrestd (log: $RUN/log/slurmrestd.log)" 20 rest_ok
  fi
  # An operator-level token for relaunch: SlurmUser's (the stack runs Slurm as $(id -un)); on a real
  # cluster it is a user with AdminLevel=Operator (docs/install-kubernetes.md).
  if [ ! -s "$REST_TOKEN" ] || [ -n "$(find "$REST_TOKEN" -mmin +$((REST_TOKEN_LIFESPAN / 120)) 2>/dev/null)" ]; then
    (umask 077; scontrol token lifespan="$REST_TOKEN_LIFESPAN" username="$(id -un)" > "$REST_TOKEN.new") \
      || die "scontrol token failed (is auth/jwt on in $RUN/slurm/slurm.conf?)"
    mv "$REST_TOKEN.new" "$REST_TOKEN"
  fi
}

write_slurm_conf() {
  local S=$RUN/slurm user; user=$(id -un)
  mkdir -p "$S/state" "$S/log" "$S/munge" "${NODES[@]/#/$S/spool/}"
  local acct="AccountingStorageType=accounting_storage/none" node_lines CTLD_ADDR="" n
  if [ "$TOPOLOGY" = hosts ]; then  # one line per host: each node has its own address
    CTLD_ADDR=$HOSTNET.1; node_lines=""
    for n in "${NODES[@]}"; do
      node_lines+="NodeName=$n NodeHostname=localhost NodeAddr=$(node_addr "$n") Port=$((NODE_PORT0 + ${n#node})) CPUs=2 RealMemory=1000 State=UNKNOWN"$'\n'
    done
    node_lines=${node_lines%$'\n'}
  else
    node_lines="NodeName=node[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((NODE_PORT0 + 1))-$((NODE_PORT0 + 4))] CPUs=2 RealMemory=1000 State=UNKNOWN"
  fi
  if have_accounting; then  # AccountingStoragePass names the munge socket clients use to reach slurmdbd
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$S/munge/munge.socket
AccountingStoreFlags=job_comment"
  fi
  cat > "$S/slurm.conf" <<CONF
# Generated by scripts/stack.sh: a 4-node Slurm cluster on one machine (slurmd -N nodeX).
ClusterName=$CLUSTER
SlurmctldHost=localhost${CTLD_ADDR:+($CTLD_ADDR)}
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket
$(jwt_conf)
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
$acct
JobCompType=jobcomp/filetxt
JobCompLoc=$S/log/jobcomp.txt
SchedulerType=sched/backfill
${SCHED_PARAMS:+SchedulerParameters=$SCHED_PARAMS}
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=${RELAUNCH_SLURMD_TIMEOUT:-30}
InactiveLimit=0
MinJobAge=$MIN_JOB_AGE
KillWait=5
Waittime=0
$node_lines
PartitionName=debug Nodes=node[1-4] Default=YES MaxTime=INFINITE State=UP
CONF
  # slurmd 23.02 and later exits without a cgroup filesystem unless told not to use one; 22.05
  # refuses this line (docs/slurm-versions.md).
  if [ -n "$SLURM_RELEASE" ]; then echo "CgroupPlugin=disabled" > "$S/cgroup.conf"; else rm -f "$S/cgroup.conf"; fi
}

# Job accounting: slurmdbd on a private MariaDB (127.0.0.1:$MARIADB_PORT, datadir and socket under
# $RUN/mariadb), never the machine's own MariaDB. mariadbd starts first in infra_up and is waited for
# only here, so its ~1 s start-up overlaps NATS, Redis and PostgreSQL.
MDB=$RUN/mariadb
mariadb_cli() { mariadb --no-defaults -S "$MDB/mysqld.sock" -uroot "$@"; }

start_mariadb() {
  have_accounting || return 0
  alive "$RUN/pids/mariadb.pid" && return 0
  mkdir -p "$MDB"; chmod 700 "$MDB"; port_free "$MARIADB_PORT"
  # In the background, the first-time install included (the subshell becomes mariadbd: its pid is the server's).
  ( if [ ! -d "$MDB/data/mysql" ]; then
      mariadb-install-db --no-defaults --datadir="$MDB/data" --user="$(id -un)" --auth-root-authentication-method=normal \
        --skip-test-db >"$RUN/log/mariadb-install.log" 2>&1 || exit 1
    fi
    exec nohup mariadbd --no-defaults --datadir="$MDB/data" --user="$(id -un)" --bind-address=127.0.0.1 \
      --port="$MARIADB_PORT" --socket="$MDB/mysqld.sock" --pid-file="$MDB/mariadbd.pid" --log-error="$RUN/log/mariadb.log" \
      --skip-name-resolve --skip-log-bin --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0 >/dev/null 2>&1
  ) &
  echo $! > "$RUN/pids/mariadb.pid"
}

start_slurmdbd() {  # after munged, before slurmctld
  local S=$RUN/slurm user; user=$(id -un)
  if ! have_accounting; then
    say "slurmdbd or mariadb-server is not installed (run make setup): no job accounting, sacct will not work"
    return 0
  fi
  wait_for "MariaDB (logs: $RUN/log/mariadb*.log)" 30 mariadb_cli -e 'SELECT 1'
  [ -s "$MDB/slurm.pw" ] || { (umask 077; head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$MDB/slurm.pw"); }
  mariadb_cli -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$(cat "$MDB/slurm.pw")';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "could not prepare slurmdbd's database"
  if [ "$WIPE_ACCOUNTING" = 1 ]; then
    mariadb_cli -e "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;" \
      || die "could not empty slurmdbd's database for the new Slurm release"
  fi
  # slurmdbd reads slurmdbd.conf from the folder of $SLURM_CONF; it must be private to SlurmUser.
  (umask 077; cat > "$S/slurmdbd.conf" <<CONF
# Generated by scripts/stack.sh: slurmdbd on the stack's private MariaDB (TCP, never the default socket).
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket
$(jwt_conf)
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=$user
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MARIADB_PORT
StorageUser=slurm
StoragePass=$(cat "$MDB/slurm.pw")
StorageLoc=slurm_acct_db
LogFile=$S/log/slurmdbd.log
PidFile=$RUN/pids/slurmdbd.pid
CONF
  )
  alive "$RUN/pids/slurmdbd.pid" || { port_free "$DBD_PORT"; slurmdbd; } || die "slurmdbd did not start: see $S/log/slurmdbd.log"
  wait_for "slurmdbd (log: $S/log/slurmdbd.log)" 20 sacctmgr -n list cluster
  # No `sacctmgr add cluster`: slurmctld registers its cluster with slurmdbd when it starts.
}

# --- the Slurm release (docs/slurm-versions.md) -------------------------------------------------
# Without RELAUNCH_SLURM the host's packages run the cluster. With 24.11 or 26.05, that release's
# daemons and clients run from its release root (scripts/slurm-root.sh) through wrappers in
# $RUN/slurm/bin, first on PATH here, in $RUN/env and so for every relaunch service: each release's
# clients talk only to its own controller. Paths are the same inside and outside the root (the run
# folder, the checkout, /tmp and the venv's Python are bind-mounted into it at the same place).
MARKER=.relaunch-slurm-root

release_wrappers() {  # root
  local root=$1 prog path d
  rm -rf "$SLURM_BIN"; mkdir -p "$SLURM_BIN"
  for prog in scontrol squeue sacct sinfo sbatch scancel srun salloc sattach sacctmgr sstat sprio sshare sdiag \
              slurmctld slurmd slurmdbd slurmrestd; do
    path=
    for d in /usr/bin /usr/sbin; do [ -x "$root$d/$prog" ] && path=$d/$prog; done
    [ -n "$path" ] || continue
    cat > "$SLURM_BIN/$prog" <<WRAP
#!/bin/sh
# Slurm $SLURM_RELEASE's $prog from its release root $root (written by scripts/stack.sh).
# Inside the root already (a job script calling srun or scontrol): run it directly.
[ -e /$MARKER ] && exec $path "\$@"
exec chroot $root /bin/sh -c 'cd "\$0" 2>/dev/null || cd /; exec "\$@"' "\$PWD" $path "\$@"
WRAP
    chmod 755 "$SLURM_BIN/$prog"
  done
}

# A run folder keeps the release it was made with: slurmctld's state and the accounting database of
# one release are not read by another (an older one never; a newer one only within two releases).
WIPE_ACCOUNTING=0
use_release() {
  local want=${SLURM_RELEASE:-host} had
  had=$(cat "$RUN/slurm/release" 2>/dev/null || echo "$want")
  if [ "$had" != "$want" ]; then
    if slurm_alive slurmctld; then
      die "the stack in $RUN runs Slurm $had, not $want: run make down first (or use another RELAUNCH_RUN_DIR and RELAUNCH_PORT_BASE to run both)"
    fi
    say "the stack in $RUN ran Slurm $had before: starting Slurm $want with a fresh controller state and accounting database"
    rm -rf "$RUN/slurm/state"; WIPE_ACCOUNTING=1
  fi
  mkdir -p "$RUN/slurm"; echo "$want" > "$RUN/slurm/release"; echo "$SLURM_API" > "$RUN/slurm/api"
  if [ -z "$SLURM_RELEASE" ]; then rm -rf "$SLURM_BIN"; return 0; fi
  [ "$(id -u)" = 0 ] || die "Slurm $SLURM_RELEASE runs from a release root, which needs root (chroot)"
  local root; root=$(bash "$REPO/scripts/slurm-root.sh" path "$SLURM_RELEASE")
  [ -f "$root/$MARKER" ] || die "Slurm $SLURM_RELEASE is not set up here: run make setup SLURM=$SLURM_RELEASE"
  local py; py=$("$PY" -c 'import sys; print(sys.base_prefix)')
  bash "$REPO/scripts/slurm-root.sh" mount "$SLURM_RELEASE" "$RUN" "$REPO" /tmp "$py" || die "could not prepare the Slurm $SLURM_RELEASE root"
  release_wrappers "$root"
  export PATH=$SLURM_BIN:$PATH
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
  make_jwt_key
  start_slurmdbd
  slurm_alive slurmctld || { port_free "$CTLD_PORT"; slurmctld; } || die "slurmctld did not start: see $S/log/slurmctld.log"
  wait_for "slurmctld" 20 bash -c "scontrol ping | grep -q UP"
  for n in "${NODES[@]}"; do
    slurm_alive "slurmd-$n" || on_host "$n" slurmd -N "$n" || die "slurmd -N $n did not start: see $S/log/slurmd-$n.log"
  done
  wait_for "4 idle Slurm nodes" 30 bash -c \
    "[ \$(sinfo -h -N -o '%N %t' | grep -cvE 'down|unk|drain|fail') -ge 4 ]"
  start_slurmrestd
}

start_service() {  # name, health url, command...  (HOST=nodeX: in that node's namespace, hosts topology)
  local name=$1 url=$2 host=${HOST:-} pre=(); shift 2
  alive "$RUN/pids/$name.pid" && return 0
  [ "$TOPOLOGY" = hosts ] && [ -n "$host" ] && pre=(nsenter --net="/run/netns/$(ns_of "$host")")
  # Each service connects to NATS as its own user (named like the service).
  ( set -a; . "$RUN/env"; RELAUNCH_SLURM_API=$SLURM_API; RELAUNCH_NATS_USER=$name; RELAUNCH_NATS_PASSWORD_FILE=$RUN/creds/$name.pass; set +a
    exec "${pre[@]}" setsid nohup "$@" >>"$RUN/log/$name.log" 2>&1 ) &
  echo $! > "$RUN/pids/$name.pid"
  STARTED+=("$name|$url|$host")
}

# A command on one node's host: in its network namespace (hosts topology), else as it is. nsenter
# enters only the network namespace (ip netns exec also remounts /sys, hiding the cgroup tree slurmd reads).
on_host() {  # node|"" command...
  local n=$1; shift
  if [ "$TOPOLOGY" = hosts ] && [ -n "$n" ]; then nsenter --net="/run/netns/$(ns_of "$n")" "$@"; else "$@"; fi
}

# --- hosts topology: the bridge, one namespace and veth pair per node (only addresses made here) ---
use_topology() {
  local had; had=$(cat "$RUN/topology" 2>/dev/null || echo "$TOPOLOGY")
  if [ "$had" != "$TOPOLOGY" ] && slurm_alive slurmctld; then
    die "the stack in $RUN runs the $had topology, not $TOPOLOGY: run make down first"
  fi
  echo "$TOPOLOGY" > "$RUN/topology"
  [ "$TOPOLOGY" = hosts ] || return 0
  [ "$(id -u)" = 0 ] || die "RELAUNCH_TOPOLOGY=hosts needs root (ip netns, veth pairs)"
  command -v ip >/dev/null || die "RELAUNCH_TOPOLOGY=hosts needs iproute2 (ip): run make setup"
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge || die "could not create bridge $BRIDGE"
  [[ "$(ip -o -4 addr show dev "$BRIDGE")" == *" $HOSTNET.1/"* ]] || ip addr add "$HOSTNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local n i
  for n in "${NODES[@]}"; do make_host "$(ns_of "$n")" "$(veth_of "$n")" "$(node_addr "$n")"; done
  nats_in_ns || return 0
  for i in $(nats_ids); do make_host "$(nats_ns "$i")" "$(nats_veth "$i")" "$(nats_addr "$i")"; done  # a NATS server each
}

make_host() {  # namespace veth address: a host of its own on the stack's bridge (idempotent)
  local ns=$1 v=$2 addr=$3
  [ -e "/run/netns/$ns" ] || ip netns add "$ns" || die "could not create network namespace $ns"
  # A link left from an earlier namespace of that name (one another mount namespace kept alive) is
  # not this one's: made again.
  if ip link show "$v" >/dev/null 2>&1 && ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then ip link del "$v"; fi
  if ! ip link show "$v" >/dev/null 2>&1; then
    ip link add "$v" type veth peer name eth0 netns "$ns" || die "could not create veth $v for $ns"
    ip link set "$v" master "$BRIDGE"
  fi
  [[ "$(ip -n "$ns" -o -4 addr show dev eth0)" == *" $addr/"* ]] || ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up; ip -n "$ns" link set eth0 up; ip link set "$v" up
}

remove_host() {  # namespace veth: what make_host made, its processes killed first
  local ns=$1 v=$2 pid
  [ -e "/run/netns/$ns" ] || return 0
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  ip link del "$v" 2>/dev/null || true  # both ends, even if something keeps the namespace
  ip netns del "$ns" 2>/dev/null || true
}

topology_down() {  # after every process is stopped: remove what use_topology made
  [ "$(cat "$RUN/topology" 2>/dev/null || echo local)" = hosts ] || return 0
  local n i
  for n in "${NODES[@]}"; do remove_host "$(ns_of "$n")" "$(veth_of "$n")"; done
  for i in 1 2 3; do remove_host "$(nats_ns "$i")" "$(nats_veth "$i")"; done
  ip link del "$BRIDGE" 2>/dev/null || true
}

host_fault() {  # cut|heal|freeze|thaw|kill|revive NODE
  local what=$1 n=${2:-} ns pid
  [ "$(cat "$RUN/topology" 2>/dev/null || echo local)" = hosts ] \
    || die "$what needs the hosts topology: start the stack with RELAUNCH_TOPOLOGY=hosts (docs/reliability.md)"
  [[ " ${NODES[*]} " == *" $n "* ]] || die "usage: $0 $what NODE (one of ${NODES[*]})"
  ns=$(ns_of "$n")
  case "$what" in
    cut) ip link set "$(veth_of "$n")" down ;;
    heal) ip link set "$(veth_of "$n")" up ;;
    freeze) for pid in $(ip netns pids "$ns"); do kill -STOP "$pid" 2>/dev/null || true; done ;;
    thaw) for pid in $(ip netns pids "$ns"); do kill -CONT "$pid" 2>/dev/null || true; done ;;
    kill) for pid in $(ip netns pids "$ns"); do kill -KILL "$pid" 2>/dev/null || true; done ;;
    revive)
      export SLURM_CONF=$RUN/slurm/slurm.conf
      [ -n "$SLURM_RELEASE" ] && export PATH=$SLURM_BIN:$PATH
      alive "$RUN/pids/slurmd-$n.pid" || on_host "$n" slurmd -N "$n" || die "slurmd -N $n did not start"
      services_up ;;
  esac
}

nats_fault() {  # nats-kill|nats-start N: one server of the cluster killed (SIGKILL, no goodbye) or started
  local what=$1 i=${2:-}
  [ "$NATS_SERVERS" != 1 ] || die "$what needs the NATS cluster: start the stack with RELAUNCH_NATS_SERVERS=3"
  [[ " $(nats_ids | tr '\n' ' ')" == *" $i "* ]] || die "usage: $0 $what N (1..$NATS_SERVERS)"
  case "$what" in
    nats-kill) alive "$(nats_pidfile "$i")" && kill -KILL "$(cat "$(nats_pidfile "$i")")"; rm -f "$(nats_pidfile "$i")" ;;
    nats-start) start_nats_server "$i"; wait_for "NATS server $i" 60 nats_healthy "$i" ;;
  esac
}

services_up() {
  [ -f "$RUN/env" ] || die "infra is not up: run scripts/stack.sh infra-up first"
  STARTED=()
  export RELAUNCH_DETECTOR_HEALTH_PORT=$HEALTH_DETECTOR RELAUNCH_DECIDER_HEALTH_PORT=$HEALTH_DECIDER \
         RELAUNCH_ACTUATOR_HEALTH_PORT=$HEALTH_ACTUATOR RELAUNCH_API_PORT=$API_PORT
  start_service decider "http://127.0.0.1:$HEALTH_DECIDER/healthz" "$PY" -m relaunch.decider
  # A job's output is read only where its user could read it, under its working directory or these roots
  # (docs/security.md): the stack's own job directory.
  # The local and test stacks' own hang floor: their jobs step every second or so, and the tests wait for
  # the hangs they cause. A cluster's default is 10 minutes (docs/operator-guide.md, "Hangs").
  RELAUNCH_DETECTOR_LOG_ROOTS=${RELAUNCH_DETECTOR_LOG_ROOTS:-$RUN/jobs} \
  RELAUNCH_DETECTOR_HANG_FLOOR_S=${RELAUNCH_DETECTOR_HANG_FLOOR_S:-10} \
    start_service detector "http://127.0.0.1:$HEALTH_DETECTOR/healthz" "$PY" -m relaunch.detector
  start_service actuator "http://127.0.0.1:$HEALTH_ACTUATOR/healthz" "$PY" -m relaunch.actuator
  RELAUNCH_WATCHDOG_HEALTH_PORT=$HEALTH_WATCHDOG start_service watchdog "http://127.0.0.1:$HEALTH_WATCHDOG/healthz" \
    "$PY" -m relaunch.actuator.watchdog
  start_service api "http://127.0.0.1:$API_PORT/healthz" "$PY" -m relaunch.api
  # Webhook routes: $RELAUNCH_NOTIFIER_ROUTES_FILE, else $RUN/notifier/routes.toml when there is one
  # (docs/notifications.md); without one it acks events and posts nowhere.
  local routes=${RELAUNCH_NOTIFIER_ROUTES_FILE:-}
  [ -z "$routes" ] && [ -f "$RUN/notifier/routes.toml" ] && routes=$RUN/notifier/routes.toml
  RELAUNCH_NOTIFIER_HEALTH_PORT=$HEALTH_NOTIFIER RELAUNCH_NOTIFIER_ROUTES_FILE=$routes \
    start_service notifier "http://127.0.0.1:$HEALTH_NOTIFIER/healthz" "$PY" -m relaunch.notifier
  local i=0
  for n in "${NODES[@]}"; do
    i=$((i + 1))
    # No GPUs here: the fake backend, asked for by name and confirmed (it obeys relaunch inject;
    # everywhere else the probe reads NVML: docs/operator-guide.md, "gpu-probe").
    HOST=$n RELAUNCH_PROBE_HEALTH_PORT=$((HEALTH_PROBE0 + i)) RELAUNCH_PROBE_BACKEND=fake RELAUNCH_PROBE_ALLOW_FAKE=1 \
      start_service "gpu-probe-$n" "http://127.0.0.1:$((HEALTH_PROBE0 + i))/healthz" "$PY" -m relaunch.gpu_probe --node "$n"
  done
  local name url host
  for entry in "${STARTED[@]}"; do
    IFS='|' read -r name url host <<<"$entry"
    wait_service "$name" "$url" "$host"
  done
}

# Until the service answers its health URL, for 60 s at most; a service that exits meanwhile (a setting
# it cannot read, a port in use) is said at once, with its log's tail, and the services this call
# started are stopped again: all of them up, or none.
wait_service() {  # name, health url, host
  local name=$1 url=$2 host=$3 end=$((SECONDS + 60)) entry
  until on_host "$host" "$PY" -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
      "$url" >/dev/null 2>&1; do
    if ! alive "$RUN/pids/$name.pid" || [ $SECONDS -ge "$end" ]; then
      local why="exited while starting"; alive "$RUN/pids/$name.pid" && why="did not answer $url within 60s"
      printf '\033[31m[stack] %s %s; the end of %s:\033[0m\n' "$name" "$why" "$RUN/log/$name.log" >&2
      tail -n 15 "$RUN/log/$name.log" 2>/dev/null | sed 's/^/    /' >&2
      for entry in "${STARTED[@]}"; do stop_pidfile "$RUN/pids/${entry%%|*}.pid"; done
      die "services not started: fix what $name says above and run services-up again"
    fi
    sleep 0.1
  done
}

services_down() {
  for f in "$RUN"/pids/{actuator,watchdog,detector,decider,api,notifier,gpu-probe-*}.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
  return 0
}

infra_up() {
  if [ "$SLURM_API" = rest ] && [ -z "$SLURM_RELEASE" ]; then
    die "SLURM_API=rest needs Slurm 24.11 or 26.05 (make up SLURM=24.11 SLURM_API=rest): relaunch reads slurmrestd's data_parser v0.0.40 and later, and 22.05 has v0.0.38"
  fi
  mkdir -p "$RUN/log" "$RUN/pids" "$RUN/jobs"
  # The bearer token for state-changing API calls (relaunch jobs mode ... --token-file $RUN/api-token).
  [ -s "$RUN/api-token" ] || { (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RUN/api-token"); }
  use_topology
  write_env
  write_consumer_envs
  use_release
  start_mariadb; start_nats; start_redis; start_postgres; start_slurm
  local from="the host's packages"; [ -n "$SLURM_RELEASE" ] && from="the release root of $SLURM_RELEASE"
  say "Slurm $(scontrol --version | awk '{print $2}') ($from)"
}

down() {
  [ -d "$RUN/pids" ] || { say "nothing to stop in $RUN"; return 0; }
  services_down
  export SLURM_CONF=$RUN/slurm/slurm.conf
  for f in slurmctld "${NODES[@]/#/slurmd-}"; do slurm_alive "$f" || true; done  # their pid files right, so that they are stopped
  for f in "$RUN/pids/slurmrestd.pid" "$RUN"/pids/slurmd-*.pid "$RUN/pids/slurmctld.pid" "$RUN/pids/slurmdbd.pid" "$RUN/pids/mariadb.pid" \
           "$RUN/pids/munged.pid" "$RUN/pids/redis.pid" "$RUN"/pids/nats*.pid; do
    [ -e "$f" ] && stop_pidfile "$f"
  done
  topology_down
  local pgdata; pgdata=$(pg_dir)/data
  if [ -f "$pgdata/PG_VERSION" ] && as_pg "$(pg_bin)/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
    as_pg "$(pg_bin)/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null
  fi
  say "stopped the stack in $RUN"
}

stop_server() {  # one infrastructure server, for fault tests (tests/reliability); infra-up starts it again
  case "${1:-}" in
    nats) for f in "$RUN"/pids/nats*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done; return 0 ;;
    redis|slurmctld|slurmdbd|slurmrestd) slurm_alive "$1" || true; stop_pidfile "$RUN/pids/$1.pid" ;;
    postgres)
      local pgdata; pgdata=$(pg_dir)/data
      as_pg "$(pg_bin)/pg_ctl" -D "$pgdata" status >/dev/null 2>&1 && as_pg "$(pg_bin)/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null
      return 0 ;;
    *) die "usage: $0 stop nats|redis|postgres|slurmctld|slurmdbd|slurmrestd" ;;
  esac
}

status() {
  [ -f "$RUN/slurm/release" ] && echo "slurm $(cat "$RUN/slurm/release")"
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
  stop) stop_server "${2:-}"; say "stopped ${2:-} in $RUN (infra-up starts it again)" ;;
  cut|heal|freeze|thaw|kill|revive)  # one node or several, one right after another (a whole-rack cut at once)
    what=$1; shift; [ $# -gt 0 ] || set -- ""
    for node in "$@"; do host_fault "$what" "$node"; done; say "$what $* in $RUN" ;;
  nats-kill|nats-start) nats_fault "$1" "${2:-}"; say "$1 ${2:-} in $RUN" ;;
  *) echo "usage: $0 up|down|infra-up|services-up|services-down|status|stop SERVER|cut|heal|freeze|thaw|kill|revive NODE...|nats-kill|nats-start N" >&2; exit 2 ;;
esac
