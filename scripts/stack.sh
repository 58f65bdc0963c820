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
# The parts, in this order (each defines functions, and config.sh the settings they read): sourcing them
# in turn is the same as the one long script this was.
for _part in config base servers slurm hosts services; do
  # shellcheck source=/dev/null
  source "scripts/stack/$_part.sh"
done


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
