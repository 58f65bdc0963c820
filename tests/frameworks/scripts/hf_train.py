"""HF Trainer on the tiny GPT-2 (transformers' own loop, progress bar and log dicts).

    python hf_train.py STEPS [--callback]   (FAULT=... see faults.py)"""

from __future__ import annotations

import sys

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


def main() -> None:
    steps = int(sys.argv[1])
    callbacks = [Faults()]
    if "--callback" in sys.argv:
        from relaunch.client.callbacks import HFProgressCallback
        callbacks.append(HFProgressCallback())
    args = TrainingArguments(output_dir="hf-out", max_steps=steps, per_device_train_batch_size=8,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                             learning_rate=5e-4, dataloader_num_workers=0, disable_tqdm=False)
    torch.set_num_threads(1)
    PoisonedTrainer(model=tiny.gpt2(), args=args, train_dataset=tiny.RandomTokens(),
                    callbacks=callbacks).train()


if __name__ == "__main__":
    main()
