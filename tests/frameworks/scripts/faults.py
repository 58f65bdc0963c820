"""Faults the real-framework tier injects into real trainings, chosen by environment variables so one
training script serves every case: FAULT=<kind>, FAULT_STEP=<step>, FAULT_RANK=<rank> (default 0).

kinds: raise (a rank raises), kill (a rank SIGKILLs itself), stuck (a rank stops before the next
collective, forever), stop (every rank stops making progress: a hang without a collective), node (the
processes of node FAULT_NODE, its torchrun agent included, are SIGKILLed: a node lost), nan (the
loss becomes NaN from FAULT_STEP on), worker (a DataLoader worker is killed by a signal), shape (a shape
error in the model), module (a missing module is imported), native (a rank stops in a native call, a C
sleep through ctypes, as in a hung driver call), loader (every rank blocks reading its data: a read on
a pipe nobody writes, inside the DataLoader's fetch). FAULT_MARK=<folder>: stuck and native write where
they struck there (_mark)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time

# Faults strike the first attempt only (a restarted job then shows the recovery), unless FAULT_EVERY=1.
KIND = os.environ.get("FAULT", "") if (os.environ.get("SLURM_RESTART_COUNT", "0") in ("", "0")
                                       or os.environ.get("FAULT_EVERY") == "1") else ""
STEP = int(os.environ.get("FAULT_STEP", "10"))
RANK = int(os.environ.get("FAULT_RANK", "0"))


def rank() -> int:
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def at_step(step: int) -> None:
    """Called by the training loop before `step` runs (1-based); does what FAULT says there."""
    if step != STEP or not KIND:
        if KIND == "module" and step == 1:
            import relaunch_no_such_module  # noqa: F401 - the fault: a module the job does not have
        return
    mine = rank() == RANK
    if KIND == "raise" and mine:
        raise RuntimeError(f"injected failure on rank {rank()} at step {step}")
    if KIND == "kill" and mine:
        os.kill(os.getpid(), signal.SIGKILL)
    if KIND == "node" and os.environ.get("SLURM_NODEID") == os.environ.get("FAULT_NODE", "1"):
        os.kill(os.getppid(), signal.SIGKILL)  # the torchrun agent
        os.kill(os.getpid(), signal.SIGKILL)
    if (KIND == "stuck" and mine) or KIND == "stop":
        _mark()
        while True:
            time.sleep(3600)
    if KIND == "native" and mine:
        _mark()
        while True:
            ctypes.CDLL(None).sleep(3600)


def _mark() -> None:
    """With FAULT_MARK=<folder>: where the fault struck (rank, node, pid), for a test or bench to judge
    whom relaunch blamed against the truth rather than against its own reading of the job. A file, not
    a log line, so that the detector's reading of the log is the same with or without it."""
    folder = os.environ.get("FAULT_MARK")
    if folder:
        name = f"fault-{os.environ.get('SLURM_JOB_ID', 'x')}-{os.environ.get('SLURM_RESTART_COUNT') or 0}-{rank()}.json"
        with open(os.path.join(folder, name), "w") as fh:
            json.dump({"kind": KIND, "rank": rank(), "node": os.environ.get("SLURMD_NODENAME", ""),
                       "pid": os.getpid(), "at": time.time()}, fh)


class Loader:
    """A dataset that, with FAULT=loader, blocks every rank in its fetch of step FAULT_STEP's batch."""

    def __init__(self, data, batch: int) -> None:
        self.data, self.batch, self.fetched = data, batch, 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        self.fetched += 1
        if KIND == "loader" and self.fetched == (STEP - 1) * self.batch + 1:
            r, _w = os.pipe()
            os.read(r, 1)  # nobody writes: blocked, as on a stalled file system or a dead data service
        return self.data[i]


def poisoned(step: int) -> bool:
    """True when the loss must be NaN at this step."""
    return KIND == "nan" and step >= STEP


def worker_fault(step: int) -> bool:
    return KIND == "worker" and step >= STEP


def kill_worker(info_pid: int | None) -> None:
    if info_pid:
        os.kill(info_pid, signal.SIGKILL)
