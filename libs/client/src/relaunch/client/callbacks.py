"""One-line progress callbacks for HF Trainer and Lightning: each reports every optimizer step (and the
loss and grad norm, for divergence detection) through report_progress (docs/user-guide.md, "Progress");
HF's reports each checkpoint it saved, too (docs/goodput.md).

    Trainer(..., callbacks=[HFProgressCallback()])
    pl.Trainer(..., callbacks=[LightningProgressCallback()])

The frameworks are imported only when a callback is made, so relaunch.client does not depend on them.
Only the global rank 0 reports (every rank is at the same step in data-parallel training). Outside a
Slurm job report_progress does nothing, so a callback left in a script run on a laptop costs nothing.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .progress import report_progress

Report = Callable[..., None]


def _number(value: Any) -> float | None:
    """A float from a logged value: a tensor, a number or (transformers 5.x) a string; None otherwise."""
    try:
        if hasattr(value, "item"):
            value = value.item()
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number


class _Pace:
    def __init__(self) -> None:
        self.at: float | None = None
        self.step: int | None = None

    def step_time(self, step: int) -> float | None:
        now = time.monotonic()
        took = None
        if self.at is not None and self.step is not None and step > self.step:
            took = (now - self.at) / (step - self.step)
        self.at, self.step = now, step
        return took


def HFProgressCallback(report: Report = report_progress):  # noqa: N802 - reads as a class where it is used
    """A transformers.TrainerCallback reporting each step (and each logged loss and grad norm)."""
    from transformers import TrainerCallback

    class _HFProgress(TrainerCallback):
        def __init__(self) -> None:
            self.pace = _Pace()

        def on_step_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                step = int(state.global_step)
                report(step, step_time_s=self.pace.step_time(step))

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "loss" not in logs:
                return
            loss, grad = _number(logs.get("loss")), _number(logs.get("grad_norm"))
            report(int(state.global_step), loss=loss, grad_norm=grad)

        def on_save(self, args, state, control, **kwargs):
            # Called once the Trainer has written the checkpoint: a save of the ledger (docs/goodput.md),
            # which HF's own log does not end with a line unless it rotates old checkpoints.
            if state.is_world_process_zero:
                report(int(state.global_step), checkpoint_saved=True)

    return _HFProgress()


def LightningProgressCallback(report: Report = report_progress):  # noqa: N802
    """A Lightning Callback reporting each optimizer step and the loss the step returned."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback

    class _LightningProgress(Callback):
        def __init__(self) -> None:
            self.pace = _Pace()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_rank != 0:
                return
            step = int(trainer.global_step)
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            report(step, step_time_s=self.pace.step_time(step), loss=_number(loss) if loss is not None else None)

    return _LightningProgress()
