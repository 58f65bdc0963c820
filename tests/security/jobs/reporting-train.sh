#!/bin/bash
# Training that reports its progress through relaunch.client (the SDK), which prints its key into this log
# ("relaunch: progress key ...") and sends it with every report: a finite loss every STEP_SECONDS, and NaN
# losses once the file NAN_WHEN exists (the positive control of tests/security/test_forged_progress.py).
# Prints no step lines of its own, so that every step the detector knows of came from a report.
#   RELAUNCH_TEST_PYTHON  a Python with relaunch.client    STEPS  at most this many (default 400)
exec "${RELAUNCH_TEST_PYTHON:-python3}" - <<'PY'
import math
import os
import time

from relaunch.client import report_progress

trigger = os.environ.get("NAN_WHEN", "")
print(f"[train] attempt {os.environ.get('SLURM_RESTART_COUNT', '0')}: reporting progress", flush=True)
for step in range(1, int(os.environ.get("STEPS", "400")) + 1):
    diverged = bool(trigger) and os.path.exists(trigger)
    report_progress(step, throughput=100.0, step_time_s=0.5, loss=math.nan if diverged else 2.0)
    time.sleep(float(os.environ.get("STEP_SECONDS", "0.5")))
print("[train] finished", flush=True)
PY
