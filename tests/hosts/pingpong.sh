#!/bin/bash
# Two hosts, one task each, talking over the stack's network (tests/hosts/pingpong.py).
#SBATCH --nodes=2 --ntasks-per-node=1 --job-name=pingpong
exec srun "$PINGPONG_PY" "$PINGPONG_DIR/pingpong.py" "$PINGPONG_RDV"
