"""torchrun DDP on gloo with the tiny GPT-2 and a plain PyTorch loop; rank 0 prints one line per step in
the format LOG_FORMAT names: plain (`step N/M | loss X | T s/step`), megatron, torchtitan or deepspeed
(each the way that framework prints it), so the detector's presets meet real runs of real ranks.

    torchrun --nproc_per_node 2 ddp_train.py STEPS [--save-every N --save-seconds S]
    (FAULT=... see faults.py; PG_TIMEOUT=<s> on the faulted attempt)

--save-every: a checkpoint save after every N steps (not after the last) lasting about S seconds on every
rank, announced as Megatron-LM announces its saves (`saving checkpoint at iteration N to ...`, then
`successfully saved checkpoint from iteration N to ...`): a healthy pause."""

from __future__ import annotations

import datetime as dt
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import faults
import tiny

FORMAT = os.environ.get("LOG_FORMAT", "plain")


def line(step: int, steps: int, loss: float, grad: float, took: float) -> str:
    if FORMAT == "megatron":
        return (f" [{dt.datetime.now():%Y-%m-%d %H:%M:%S}] iteration {step:8d}/{steps:8d} | consumed samples: "
                f"{step * 16:12d} | elapsed time per iteration (ms): {took * 1000:.1f} | learning rate: 5.000000E-04 | "
                f"global batch size:    16 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {grad:.3f} | "
                f"number of skipped iterations:   0 | number of nan iterations: {0 if math.isfinite(loss) else 1:3d} |")
    if FORMAT == "torchtitan":
        return (f"[rank0]:[titan] {dt.datetime.now():%Y-%m-%d %H:%M:%S,000} - root - INFO - step: {step:2d}  "
                f"loss: {loss:7.4f}  grad_norm: {grad:7.4f}  memory:  0.10GiB(0.00%)  tps: {int(512 / took):,}  "
                f"tflops: 0.01  mfu: 0.00%")
    if FORMAT == "deepspeed":
        return (f"[{dt.datetime.now():%Y-%m-%d %H:%M:%S,000}] [INFO] [logging.py:107:log_dist] [Rank 0] "
                f"step={step}, skipped=0, lr=[0.0005], mom=[(0.9, 0.999)]\nsteps: {step} loss: {loss:.4f} "
                f"iter time (s): {took:.3f} samples/sec: {16 / took:.3f}")
    return f"step {step}/{steps} | loss {loss:.4f} | {took:.2f} s/step"


def main() -> None:
    steps = int(sys.argv[1])
    every, pause = int(_option("--save-every") or 0), float(_option("--save-seconds") or 30)
    torch.set_num_threads(1)
    # PG_TIMEOUT (a short collective timeout) is for the attempt the fault strikes: on a restart, ranks of a
    # busy 2-core machine can be seconds apart building the model, and a 3 s timeout then fails the
    # healthy attempt in DDP's first broadcast (one CI run's restart of the stuck-rank case did).
    short = os.environ.get("PG_TIMEOUT") if faults.KIND else None
    timeout = dt.timedelta(seconds=float(short or "1800"))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    model = DistributedDataParallel(tiny.gpt2())
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    data = faults.Loader(tiny.RandomTokens(), 8)
    workers = 2 if faults.KIND == "worker" else 0
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data), num_workers=workers)
    it = iter(loader)
    started = time.monotonic()
    for step in range(1, steps + 1):
        faults.at_step(step)
        if faults.worker_fault(step) and rank == faults.RANK and workers:
            faults.kill_worker(next(iter(it._workers)).pid)  # a DataLoader worker killed by a signal
        batch = next(it)
        ids = batch["input_ids"]
        if faults.KIND == "shape" and step == faults.STEP:
            ids = ids.reshape(-1)[: ids.numel() - 3]  # a shape error inside the model
        loss = model(input_ids=ids, labels=batch["labels"]).loss
        if faults.poisoned(step):
            loss = loss * float("nan")
        opt.zero_grad()
        loss.backward()
        grad = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
        opt.step()
        took, started = time.monotonic() - started, time.monotonic()
        if rank == 0:
            print(line(step, steps, loss.item(), grad, took), flush=True)
        if every and step % every == 0 and step < steps:
            save(step, pause, rank)
            started = time.monotonic()
    dist.destroy_process_group()


def save(step: int, seconds: float, rank: int) -> None:
    """Every rank writes its shard (here: waits), then all meet, as a distributed checkpoint does."""
    if rank == 0:
        print(f" saving checkpoint at iteration {step:8d} to ckpt in torch_dist format", flush=True)
    time.sleep(seconds)
    dist.barrier()
    if rank == 0:
        print(f"  successfully saved checkpoint from iteration {step:8d} to ckpt [ t 1/1, p 1/1 ]", flush=True)


def _option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


if __name__ == "__main__":
    main()
