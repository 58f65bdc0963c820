# scripts/stack/config.sh: part of scripts/stack.sh, which sources it (never run alone).
# The stack's settings from the environment: run folder, ports, Slurm release, topology, NATS servers, and
# the names derived from them (namespaces, addresses, pid files).
# shellcheck shell=bash
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

