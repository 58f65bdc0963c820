# scripts/stack/hosts.sh: part of scripts/stack.sh, which sources it (never run alone).
# The hosts topology (a namespace and veth pair per node) and the faults between hosts and NATS servers.
# shellcheck shell=bash

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

