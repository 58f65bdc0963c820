#!/bin/bash
# One real training of the real-framework tier (tests/frameworks), as a Slurm batch job.
#   FW_PY        the tier's venv's python (scripts/frameworks-venv.sh)
#   FW_SCRIPTS   tests/frameworks/scripts;  FW_LIBS: relaunch's libs/*/src, for relaunch.client
#   FW_RUN       hf | lightning | ddp | ddp2 (torchrun on two nodes, FW_NPROC processes each, default 1) | ddp2l
#                (ddp2 under srun -l and torchrun --tee 3: every line behind the launchers' prefixes)
#   FW_ARGS      the training script's arguments;  FAULT, FAULT_STEP, ...: faults.py
#SBATCH --open-mode=append
set -u
export PYTHONPATH="$FW_SCRIPTS:$FW_LIBS" TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
# the training's working directory (HF's output folder): under the test stack's run folder
work="${FW_WORK:-${TMPDIR:-/tmp}}/fw-${SLURM_JOB_ID}-${SLURM_RESTART_COUNT:-0}"
mkdir -p "$work" && cd "$work" || exit 1
bin=$(dirname "$FW_PY")
echo "[train] attempt ${SLURM_RESTART_COUNT:-0} of $FW_RUN on $SLURMD_NODENAME"
# A single-process training replaces this shell (exec): Lightning traps SIGTERM (its Slurm requeue
# handler), and were this shell to die of scancel's SIGTERM first, the training would be reparented and
# Slurm's SIGKILL after KillWait (proctrack/linuxproc follows the process tree) would miss it.
case "$FW_RUN" in
  hf) exec "$FW_PY" "$FW_SCRIPTS/hf_train.py" $FW_ARGS ;;
  lightning) exec "$FW_PY" "$FW_SCRIPTS/lightning_train.py" $FW_ARGS ;;
  ddp) "$bin/torchrun" --standalone --nproc_per_node 2 \
         "$FW_SCRIPTS/ddp_train.py" $FW_ARGS ;;
  ddp2) srun --kill-on-bad-exit=1 "$bin/torchrun" --nnodes 2 --nproc_per_node "${FW_NPROC:-1}" --rdzv_backend c10d \
          --rdzv_endpoint "127.0.0.1:$((20000 + SLURM_JOB_ID % 10000))" --rdzv_id "$SLURM_JOB_ID" \
          "$FW_SCRIPTS/ddp_train.py" $FW_ARGS ;;
  # the same through the launchers' own line prefixes, as clusters run it: srun's task label (-l: "1: "),
  # torchrun's local-rank tee ("[default0]:"), then torch's "[rank2]: " on each traceback line
  ddp2l) srun -l --kill-on-bad-exit=1 "$bin/torchrun" --nnodes 2 --nproc_per_node "${FW_NPROC:-1}" --tee 3 \
          --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$((20000 + SLURM_JOB_ID % 10000))" --rdzv_id "$SLURM_JOB_ID" \
          "$FW_SCRIPTS/ddp_train.py" $FW_ARGS ;;
esac
rc=$?
rm -rf "$work"
exit $rc
