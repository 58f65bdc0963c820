#!/usr/bin/env bash
# Real runs of the real-framework tier's trainings (tests/frameworks/scripts), outside Slurm, saved as
# fixtures for the parser and classifier unit tests (tests/fixtures/frameworks/<case>.log): what each
# framework really prints, faults included. Run again when a framework's pin changes.
#   bash scripts/capture-framework-fixtures.sh [PYTHON]   (default: the tier's venv, scripts/frameworks-venv.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${1:-$(bash scripts/frameworks-venv.sh)}
OUT=$REPO/tests/fixtures/frameworks
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp tests/frameworks/scripts/*.py "$work"/
cd "$work"
export PYTHONPATH="$REPO/libs/common/src:$REPO/libs/client/src" TOKENIZERS_PARALLELISM=false
run() {  # name, env..., -- command...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 120 "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $?"
}
TR="$(dirname "$PY")/torchrun --nproc_per_node 2"
run hf_healthy FAULT= -- "$PY" hf_train.py 40
run hf_nan FAULT=nan FAULT_STEP=15 -- "$PY" hf_train.py 40
run lightning_tqdm_plain FAULT= -- "$PY" lightning_train.py 40 --plain
run lightning_tqdm_nan FAULT=nan FAULT_STEP=15 -- "$PY" lightning_train.py 40
run lightning_rich FAULT= -- "$PY" lightning_train.py 40 --rich
run lightning_worker_killed FAULT=worker FAULT_STEP=10 -- "$PY" lightning_train.py 40
for fmt in plain megatron torchtitan deepspeed; do
  run "ddp_${fmt}_healthy" FAULT= LOG_FORMAT=$fmt -- $TR ddp_train.py 30
done
run ddp_megatron_nan FAULT=nan FAULT_STEP=12 LOG_FORMAT=megatron -- $TR ddp_train.py 30
run ddp_torchtitan_nan FAULT=nan FAULT_STEP=12 LOG_FORMAT=torchtitan -- $TR ddp_train.py 30
run ddp_rank_raises FAULT=raise FAULT_STEP=10 FAULT_RANK=1 -- $TR ddp_train.py 30
run ddp_rank_sigkill FAULT=kill FAULT_STEP=10 FAULT_RANK=1 -- $TR ddp_train.py 30
run ddp_worker_killed FAULT=worker FAULT_STEP=10 FAULT_RANK=1 -- $TR ddp_train.py 30
run ddp_shape_error FAULT=shape FAULT_STEP=10 -- $TR ddp_train.py 30
run ddp_missing_module FAULT=module -- $TR ddp_train.py 30
run ddp_stuck_pg_timeout FAULT=stuck FAULT_STEP=10 FAULT_RANK=1 PG_TIMEOUT=15 -- $TR ddp_train.py 30
