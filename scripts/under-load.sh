#!/usr/bin/env bash
# Runs a command beside CPU-bound neighbours, as a busy CI machine would (issue 38: the suite must stay
# green under load): LOAD_PROCS busy loops (default: one per core) at the command's own priority, stopped
# when the command ends, however it ends.
#
#   bash scripts/under-load.sh make test          # what `make test-under-load` runs
#   LOAD_PROCS=4 bash scripts/under-load.sh .venv/bin/python -m pytest tests/hosts
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
procs=${LOAD_PROCS:-$(nproc)}
pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$procs"); do
  python3 -c 'while 1: pass' &
  pids+=($!)
done
echo "[under-load] $procs CPU-bound processes running beside: $*" >&2
"$@"
