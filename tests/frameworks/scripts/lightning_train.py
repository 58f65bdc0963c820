"""Lightning on the tiny GPT-2, with its TQDM bar (default) or its Rich bar.

    python lightning_train.py STEPS [--rich] [--callback] [--plain] [--eval-every N --eval-seconds S]
(TQDM bar unless --rich; FAULT=... see faults.py)
--plain also prints `step N/M | loss X | T s/step` lines, as many training scripts do.
--eval-every: Lightning's validation loop every N steps, lasting about S seconds (5 slow batches)."""

from __future__ import annotations

import sys
import time

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

import faults
import tiny


class Module(pl.LightningModule):
    def __init__(self, steps: int, plain: bool) -> None:
        super().__init__()
        self.model, self.steps, self.plain, self.t = tiny.gpt2(), steps, plain, time.monotonic()
        self.eval_pause = 0.0

    def training_step(self, batch, batch_idx):
        step = self.global_step + 1
        faults.at_step(step)
        if faults.worker_fault(step):
            import os
            import signal
            import psutil
            for child in psutil.Process().children(recursive=True):
                os.kill(child.pid, signal.SIGKILL)
        loss = self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
        if faults.poisoned(step):
            loss = loss * float("nan")
        self.log("train_loss", loss, prog_bar=True)
        if self.plain:
            now = time.monotonic()
            print(f"step {step}/{self.steps} | loss {loss.item():.4f} | {now - self.t:.2f} s/step", flush=True)
            self.t = now
        return loss

    def validation_step(self, batch, batch_idx):
        time.sleep(self.eval_pause)
        return self.model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=5e-4)


def main() -> None:
    steps = int(sys.argv[1])
    torch.set_num_threads(1)
    callbacks = []
    # Lightning's default bar is Rich when rich is installed, else TQDM; both are asked for explicitly
    if "--rich" in sys.argv:
        callbacks.append(pl.callbacks.RichProgressBar())
    else:
        callbacks.append(pl.callbacks.TQDMProgressBar())
    if "--callback" in sys.argv:
        from relaunch.client.callbacks import LightningProgressCallback
        callbacks.append(LightningProgressCallback())
    workers = 2 if faults.KIND == "worker" else 0
    loader = DataLoader(tiny.RandomTokens(), batch_size=8, num_workers=workers, persistent_workers=workers > 0)
    module = Module(steps, "--plain" in sys.argv)
    every = sys.argv[sys.argv.index("--eval-every") + 1] if "--eval-every" in sys.argv else None
    validation = {}
    if every:
        seconds = float(sys.argv[sys.argv.index("--eval-seconds") + 1]) if "--eval-seconds" in sys.argv else 30.0
        module.eval_pause = seconds / 5
        validation = dict(val_check_interval=int(every), limit_val_batches=5, num_sanity_val_steps=0)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         callbacks=callbacks, log_every_n_steps=1, enable_model_summary=False, **validation)
    trainer.fit(module, loader, DataLoader(tiny.RandomTokens(5), batch_size=1) if every else None)


if __name__ == "__main__":
    main()
