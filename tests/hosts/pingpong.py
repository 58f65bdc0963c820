"""A two-host toy training step loop whose ranks talk over the network (tests/hosts): rank 1 sends a
token each step, rank 0 waits for it (as a collective would) and prints a Megatron-LM style iteration
line. When rank 1's host is cut, rank 0 blocks in recv: the job stops progressing, as a real job does
when a peer's host is gone (no FIN arrives from a host whose link is down).

    srun python pingpong.py RENDEZVOUS_DIR
"""

import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

rank = int(os.environ["SLURM_PROCID"])
job, attempt = os.environ["SLURM_JOB_ID"], os.environ.get("SLURM_RESTART_COUNT", "0")
rdv = Path(sys.argv[1]) / f"rdv-{job}-{attempt}"
step_s = float(os.environ.get("STEP_SECONDS", "0.2"))
steps = int(os.environ.get("STEPS", "100000"))

if rank == 0:
    # This host's address on the stack's network: the one that reaches the bus.
    bus = urlparse(os.environ["RELAUNCH_NATS_URL"]).hostname
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((bus, 9))
    me = probe.getsockname()[0]
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((me, 0))
    srv.listen(1)
    tmp = rdv.with_suffix(".tmp")
    tmp.write_text(f"{me}:{srv.getsockname()[1]}")
    tmp.rename(rdv)
    conn, _ = srv.accept()
    print(f"[pingpong] attempt {attempt} on {os.environ.get('SLURMD_NODENAME')}: peer connected", flush=True)
    for it in range(1, steps + 1):
        if not conn.recv(1):
            print("[pingpong] the peer closed the connection", flush=True)
            sys.exit(1)
        print(f" iteration {it:8d}/  {steps} | consumed samples: {it * 8} | elapsed time per iteration (ms): "
              f"{step_s * 1000:.1f} | lm loss: 2.5E+00 | loss scale: 1.0 |", flush=True)
    print("[pingpong] finished", flush=True)
else:
    deadline = time.monotonic() + 60
    while not rdv.exists():
        if time.monotonic() > deadline:
            sys.exit("[pingpong] rank 0 never said where it listens")
        time.sleep(0.05)
    host, port = rdv.read_text().split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.settimeout(None)
    for _ in range(steps):
        sock.sendall(b"x")
        time.sleep(step_s)
