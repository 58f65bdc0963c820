# scripts/stack/base.sh: part of scripts/stack.sh, which sources it (never run alone).
# Helpers every part uses: messages, pid files, waits, ports, the custom consumers' declaration, Postgres paths.
# shellcheck shell=bash
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

