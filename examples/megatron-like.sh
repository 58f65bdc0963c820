#!/bin/bash
# A toy job printing Megatron-LM style iteration lines, for hang and straggler demos and tests.
#   STEPS          iterations per attempt (default 20)
#   STEP_SECONDS   wall time between lines (default 1)
#   HANG_AFTER     on attempt 0, stop printing after this many iterations and sleep (a hang)
#   SLOW_AFTER     on attempt 0, after this many iterations the reported throughput drops
#   SLOW_PERCENT   the throughput left after the drop, in percent (default 60)
#   TAIL_SECONDS   how long attempt 0 keeps running after its last line (default 0)
#SBATCH --job-name=megatron-like
#SBATCH --open-mode=append
attempt=${SLURM_RESTART_COUNT:-0}
steps=${STEPS:-20}
echo "[megatron] attempt $attempt on $SLURMD_NODENAME: building model, loading checkpoint"
for ((it = 1; it <= steps; it++)); do
  tflops=150.0
  ms=1000.0
  if [ "$attempt" -eq 0 ] && [ -n "${SLOW_AFTER:-}" ] && [ "$it" -gt "$SLOW_AFTER" ]; then
    tflops=$(( 150 * ${SLOW_PERCENT:-60} / 100 )).0
    ms=$(( 1000 * 100 / ${SLOW_PERCENT:-60} )).0
  fi
  # jitter of about 1% so that the baseline is not a flat line
  tflops="${tflops%.*}.$(( RANDOM % 10 ))"
  echo " iteration $(printf '%8d' "$it")/  500000 | consumed samples: $(( it * 512 )) | elapsed time per iteration (ms): $ms | throughput per GPU (TFLOP/s/GPU): $tflops | learning rate: 3.000E-04 | global batch size:   512 | lm loss: 2.$(( RANDOM % 1000 ))E+00 | loss scale: 1.0 |"
  if [ "$attempt" -eq 0 ] && [ -n "${HANG_AFTER:-}" ] && [ "$it" -ge "$HANG_AFTER" ]; then
    echo "[megatron] (this attempt now hangs: no more iterations)" >&2
    sleep 600
  fi
  sleep "${STEP_SECONDS:-1}"
done
[ "$attempt" -eq 0 ] && sleep "${TAIL_SECONDS:-0}"
echo "[megatron] attempt $attempt finished training"
