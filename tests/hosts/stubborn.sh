#!/bin/bash
# One host; attempt 0 crashes (a segfault line) and its process ignores SIGTERM, so Slurm keeps the
# job COMPLETING for KillWait after the requeue: a reconcile with a known pause (test_partition.py).
#SBATCH --nodes=1 --job-name=stubborn --open-mode=append
attempt=${SLURM_RESTART_COUNT:-0}
for step in 1 2 3; do echo " iteration        $step/      10 | lm loss: 2.5E+00 |"; sleep 0.3; done
if [ "$attempt" -eq 0 ]; then
  echo "Segmentation fault (core dumped)" >&2
  trap '' TERM  # inherited by sleep: only KillWait's SIGKILL ends it
  sleep 120
fi
echo "[stubborn] attempt $attempt finished"
