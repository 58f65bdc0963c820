# scripts/stack/services.sh: part of scripts/stack.sh, which sources it (never run alone).
# The relaunch services: started (each waited for on its /healthz), stopped.
# shellcheck shell=bash
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
  # 60 s on a quiet machine, times RELAUNCH_STACK_WAIT_SCALE (base.sh: a loaded machine starts slower; seen: the
  # decider 60 s between its migrations and its health server with the load at 14 on 2 cores).
  local name=$1 url=$2 host=$3 limit=$((60 * WAIT_SCALE)) entry end
  end=$((SECONDS + limit))
  until on_host "$host" "$PY" -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
      "$url" >/dev/null 2>&1; do
    if ! alive "$RUN/pids/$name.pid" || [ $SECONDS -ge "$end" ]; then
      local why="exited while starting"; alive "$RUN/pids/$name.pid" && why="did not answer $url within ${limit}s"
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
