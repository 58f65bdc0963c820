"""Write a realistic multi-rank training log of a given size (default 512 MiB) for scanner benches.

Mostly healthy lines as distributed jobs print them (Megatron iteration lines, NCCL INFO chatter,
tqdm bars, Python warnings, checkpoint saves), with a few failures near the end (an uncorrectable
ECC error, then NCCL watchdog timeouts on the other ranks, a CUDA OOM traceback). Deterministic.

    python bench/make_log.py OUT [--mib 512]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

HEALTHY = [
    " iteration {it:>8}/  500000 | consumed samples: {samples:>12} | elapsed time per iteration (ms): {ms:.1f} | "
    "learning rate: 2.999E-04 | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "gpu-node{node:03d}:{pid}:{tid} [{rank}] NCCL INFO Channel {ch:02d}/0 : {rank}[{rank}] -> {peer}[{peer}] via "
    "P2P/IPC/read",
    "gpu-node{node:03d}:{pid}:{tid} [{rank}] NCCL INFO comm 0x{comm:x} rank {rank} nranks 64 cudaDev {dev} "
    "busId {bus}000 commId 0x{comm:x} - Init COMPLETE",
    "Epoch 3:  {pct:>2}%|█████▍    | {it}/{total} [12:31<10:02, {its:.2f}it/s, loss={loss:.3f}, v_num=17]",
    "/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:61: UserWarning: None of the inputs have "
    "requires_grad=True. Gradients will be None",
    "[Rank {rank}] step={it}, skipped=0, lr=[0.00029999], mom=[(0.9, 0.95)]",
    "{{'loss': {loss:.4f}, 'grad_norm': {gn:.3f}, 'learning_rate': 2.9e-05, 'epoch': 0.{pct:02d}}}",
    "step: {it:>5}  loss: {loss:7.4f}  memory: 61.12GiB(77.19%)  tps: {tps:,}  tflops: 312.4  mfu: 31.59%",
    "saving checkpoint at iteration {it:>8} to /lustre/ckpt/gpt3-175b",
    "  successfully saved checkpoint at iteration {it:>8} to /lustre/ckpt/gpt3-175b",
]
# How often each healthy line appears: iteration lines and NCCL chatter dominate; saves are rare.
WEIGHTS = [40, 20, 5, 10, 5, 5, 5, 5, 0.05, 0.05]
FAILURES = [
    "[rank12]:[E1129 03:12:44.123456 ProcessGroupNCCL.cpp:1537] [PG 0 Rank 12] Process group watchdog thread "
    "terminated with exception: CUDA error: uncorrectable ECC error encountered",
    "[rank3]:[E1129 03:22:44.000001 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=88123, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
    "ran for 600043 milliseconds before timing out.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.02 GiB is free.",
]


def write(path: Path, mib: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    target = mib * 1024 * 1024
    written, it, planted = 0, 1, False
    with open(path, "w", encoding="utf-8") as fh:
        while written < target:
            block = []
            for _ in range(2000):
                it += 1
                tpl = rng.choices(HEALTHY, WEIGHTS)[0]
                block.append(tpl.format(
                    it=it, samples=it * 1024, ms=rng.uniform(900, 1100), loss=rng.uniform(1.5, 3.0),
                    gn=rng.uniform(0.1, 2.0), node=rng.randrange(1, 128), pid=rng.randrange(1000, 99999),
                    tid=rng.randrange(1000, 99999), rank=rng.randrange(64), peer=rng.randrange(64),
                    ch=rng.randrange(32), comm=rng.getrandbits(48), dev=rng.randrange(8),
                    bus=rng.randrange(16, 255), pct=rng.randrange(100), total=500000, its=rng.uniform(1, 3),
                    tps=rng.randrange(1000, 9000),
                ))
            if written > target * 0.98:
                block.extend(FAILURES)
                planted = True
            text = "\n".join(block) + "\n"
            fh.write(text)
            written += len(text.encode())
        if not planted:  # a log too small for the last 2% to start a block of its own
            text = "\n".join(FAILURES) + "\n"
            fh.write(text)
            written += len(text.encode())
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args()
    size = write(args.out, args.mib)
    print(f"wrote {size / 2**20:.0f} MiB to {args.out}")


if __name__ == "__main__":
    main()
