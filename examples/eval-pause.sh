#!/bin/bash
# A toy training loop in a script's own words (`step N/M | loss X | T s/step`) that evaluates every
# EVAL_EVERY steps: a healthy pause, which relaunch must not take for a hang (docs/user-guide.md, "Hangs").
#   STEPS          steps in all (default 20)
#   STEP_SECONDS   wall time of one step (default 1)
#   EVAL_EVERY     evaluate after every this many steps (default 10; not after the last)
#   EVAL_SECONDS   how long an evaluation lasts (default 30)
#   EVAL_LINE      1 (default): announce it (`evaluating at step N`, then `eval loss X`); 0: pause silently
#SBATCH --job-name=eval-pause
#SBATCH --open-mode=append
steps=${STEPS:-20}
echo "[train] attempt ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME: $steps steps, evaluating every ${EVAL_EVERY:-10}"
for ((step = 1; step <= steps; step++)); do
  sleep "${STEP_SECONDS:-1}"
  echo "step $step/$steps | loss 2.$(( RANDOM % 1000 )) | ${STEP_SECONDS:-1} s/step"
  if (( step % ${EVAL_EVERY:-10} == 0 && step < steps )); then
    [ "${EVAL_LINE:-1}" = 1 ] && echo "evaluating at step $step"
    sleep "${EVAL_SECONDS:-30}"
    [ "${EVAL_LINE:-1}" = 1 ] && echo "eval loss 2.$(( RANDOM % 1000 ))"
  fi
done
echo "[train] done"
