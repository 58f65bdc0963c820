#!/bin/bash
# An attack (tests/security/test_file_reads.py): while it runs, the job replaces its own output file by a
# symlink to a file its user cannot read (LINK_TO), then fails with no line saying why. A follower that
# opened the path with the service's privileges would read the target as this job's log.
#   OUTPUT_PATH  the job's output file (sbatch -o)    LINK_TO  the file the link points at
echo "[train] attempt ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME: step 1"
sleep "${STEP_SECONDS:-2}"
rm -f "$OUTPUT_PATH" && ln -s "$LINK_TO" "$OUTPUT_PATH"
echo "[train] step 2 (written to the unlinked file)"
sleep "${STEP_SECONDS:-2}"
exit 1
