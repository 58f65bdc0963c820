#!/bin/bash
# A toy "training job" whose first FAIL_ATTEMPTS attempts (default 1) crash, printing CRASH_LINE
# (default: a segmentation fault; {first} and {peer} in it become the allocation's first and last
# node), then it succeeds. STEP_SECONDS sets the pace.
# relaunch opts in through the comment; --open-mode=append keeps every attempt's lines in one file.
#SBATCH --job-name=flaky-train
#SBATCH --comment=relaunch:max_attempts=2
#SBATCH --open-mode=append
attempt=${SLURM_RESTART_COUNT:-0}
echo "[train] attempt $attempt on $SLURMD_NODENAME started_at=$(date +%s.%N): loading checkpoint"
for step in 1 2 3; do
  echo "[train] step $step loss=$(( 100 / step ))"
  sleep "${STEP_SECONDS:-0.5}"
done
if [ "$attempt" -lt "${FAIL_ATTEMPTS:-1}" ]; then
  echo "[train] crashing at=$(date +%s.%N)"
  line=${CRASH_LINE:-Segmentation fault (core dumped)}
  # {first} and {peer}: the first and the last node of the allocation (to name hosts in the line).
  hosts=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null)
  line=${line//\{first\}/$(echo "$hosts" | head -n 1)}
  line=${line//\{peer\}/$(echo "$hosts" | tail -n 1)}
  echo "$line" >&2
  exit 1
fi
echo "[train] finished: saved final checkpoint"
