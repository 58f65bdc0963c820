"""HF Trainer on the tiny GPT-2 (transformers' own loop, progress bar and log dicts).

    python hf_train.py STEPS [--callback] [--eval-every N --eval-seconds S]   (FAULT=... see faults.py)
--eval-every: the Trainer's evaluation loop every N steps, lasting about S seconds (9 slow batches)."""

from __future__ import annotations

import sys
import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import faults
import tiny


class Faults(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        faults.at_step(state.global_step + 1)


class PoisonedTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        if faults.poisoned(self.state.global_step + 1):
            return (out[0] * float("nan"), out[1]) if return_outputs else out * float("nan")
        return out


class SlowEval(torch.utils.data.Dataset):
    """An evaluation set of 9 samples, each taking a ninth of `seconds` to load: a long evaluation."""

    def __init__(self, seconds: float) -> None:
        self.data, self.pause = tiny.RandomTokens(9), seconds / 9

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict:
        time.sleep(self.pause)
        return self.data[i]


def _option(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def main() -> None:
    steps = int(sys.argv[1])
    every, seconds = _option("--eval-every"), float(_option("--eval-seconds") or 30)
    callbacks = [Faults()]
    if "--callback" in sys.argv:
        from relaunch.client.callbacks import HFProgressCallback
        callbacks.append(HFProgressCallback())
    args = TrainingArguments(output_dir="hf-out", max_steps=steps, per_device_train_batch_size=8,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                             learning_rate=5e-4, dataloader_num_workers=0, disable_tqdm=False,
                             **({"eval_strategy": "steps", "eval_steps": int(every), "per_device_eval_batch_size": 1}
                                if every else {}))
    torch.set_num_threads(1)
    PoisonedTrainer(model=tiny.gpt2(), args=args, train_dataset=tiny.RandomTokens(),
                    eval_dataset=SlowEval(seconds) if every else None, callbacks=callbacks).train()


if __name__ == "__main__":
    main()
