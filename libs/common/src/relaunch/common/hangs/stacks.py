"""Reading one rank process from outside: its py-spy `dump` text and two /proc/<pid>/stat samples -> where
it is (`Where`): in a collective, in the user's own Python, stuck in a native call, or in a library. Pure.

py-spy's text (0.4.x, `dump --native --full-filenames`, or `--nonblocking` without native frames):

    Thread 21914 (idle): "MainThread"
        clock_nanosleep (libc.so.6)             <- native frame: "func (library)" or "func (source.c:943)"
        time_sleep (libpython3.11.so.1.0)
        train (/home/u/train.py:9)              <- Python frame: "func (file.py:line)"
        <module> (/home/u/train.py:10)

Frames are innermost first. Invariants:
- the rank's main thread is the training loop's (the thread whose id is the pid, else the one named
  "MainThread"); other threads (the data loader's pin-memory thread, NCCL's watchdog) are not read;
- a Python frame is the user's unless its file is in site-packages/dist-packages, in the standard
  library, or frozen: the user's code is what the job's author can change;
- "native" (the node's fault, not the program's) needs positive evidence: uninterruptible sleep (D), or
  native frames above the innermost Python frame that are not the interpreter's own (a ctypes/libffi call,
  a driver or extension library). time.sleep, a lock or a pipe read in the user's code is the user's.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Literal

_THREAD = re.compile(r'^Thread (?P<tid>0x[0-9a-fA-F]+|\d+) \((?P<status>[^)]*)\)(?:: "(?P<name>.*)")?\s*$')
_FRAME = re.compile(r"^\s+(?P<func>.*?) \((?P<where>[^()]*)\)\s*$")
_PY_WHERE = re.compile(r"^(?P<file>.*\.py|<[^>]*>):(?P<line>\d+)$")
_SITE = re.compile(r"/(?:site|dist)-packages/|/lib/python\d\.\d+/|^<")
_LIBRARY_ROOTS = frozenset({"torch", "lightning", "pytorch_lightning", "transformers", "accelerate", "deepspeed",
                            "megatron", "nemo", "torchtitan", "numpy", "triton"})
_INTERPRETER_LIB = re.compile(r"^(?:libpython|python\d|libc\.so|libc-|libpthread|ld-linux|libm\.so)|^0x")
_C_SOURCE = re.compile(r"\.c(?::\d+)?$")
"""A native frame py-spy named by its C source (the interpreter's own modules, built with debug info)."""
_DISTRIBUTED = re.compile(r"torch/distributed/(?!elastic/|run\.py|launch)|c10d")
"""A collective's frames; not torchrun's agent and launcher, which live in the same package."""
_NATIVE_COLLECTIVE = re.compile(r"c10d|gloo|nccl|ProcessGroup|Reducer", re.IGNORECASE)
COLLECTIVES = frozenset({"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
                         "broadcast_object_list", "barrier", "monitored_barrier", "reduce", "reduce_scatter",
                         "reduce_scatter_tensor", "gather", "scatter", "all_to_all", "all_to_all_single",
                         "send", "recv", "isend", "irecv", "wait", "_all_gather_base", "_reduce_scatter_base"})
_BUILTINS = {"time_sleep": "time.sleep", "pysleep": "time.sleep", "os_read": "os.read", "_Py_read": "os.read",
             "os_write": "os.write", "lock_PyThread_acquire_lock": "lock.acquire",
             "rlock_acquire": "lock.acquire", "select_select": "select.select",
             "select_epoll_poll": "select.epoll.poll", "sock_recv": "socket.recv", "os_waitpid": "os.waitpid"}
"""Interpreter functions (libpython) and what the user's code called to land in them."""
MAX_FRAMES = 12
"""Frames kept per rank (innermost first): the innermost NATIVE_KEPT (what it is blocked in), then its
Python frames (where in the program); the dozens of native frames of a framework between them are not."""
NATIVE_KEPT = 4


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    """A Python file, or the native library (or C source) the frame is in."""
    line: int | None = None
    """None for a native frame."""

    @property
    def native(self) -> bool:
        return self.line is None

    def __str__(self) -> str:
        return f"{self.func} ({self.file})" if self.native else f"{self.func} ({self.file}:{self.line})"


@dataclass(frozen=True)
class Thread:
    tid: int
    name: str
    active: bool
    frames: tuple[Frame, ...]
    """Innermost first."""


@dataclass(frozen=True)
class ProcSample:
    """Two reads of /proc/<pid>/stat (and of its threads'), `interval_s` apart."""

    state: str
    """The process's (main thread's) state at the second read: R, S, D, T, Z..."""
    cpu_ticks: int
    """utime + stime gained between the reads (clock ticks, usually 1/100 s)."""
    interval_s: float
    blocked_threads: int = 0
    """Threads in uninterruptible sleep (D) at the second read."""


@dataclass(frozen=True)
class RankReading:
    """What the collector read of one rank process. `dump` None: py-spy could not read it."""

    rank: int
    node: str
    pid: int
    dump: str | None = None
    proc: ProcSample | None = None
    seq_enqueued: int | None = None
    """Flight recorder: the last collective sequence number this rank enqueued / completed, when known."""
    seq_completed: int | None = None
    error: str = ""


@dataclass(frozen=True)
class Where:
    kind: Literal["collective", "user", "native", "library", "unknown"]
    frames: tuple[Frame, ...]
    """The main thread's frames that matter (innermost first, at most MAX_FRAMES)."""
    collective: str | None = None
    """The collective it waits in (all_reduce, barrier...)."""
    place: str | None = None
    """The innermost Python frame of the user's code: "train.py:88 (train)"."""
    call: str | None = None
    """What it is in, in words: "time.sleep", "clock_nanosleep in libc.so.6 through ctypes"."""

    @property
    def key(self) -> str:
        """Two ranks with the same key are in the same place."""
        if self.kind == "collective":
            return f"collective:{self.collective}"
        top = next((f for f in self.frames if not f.native), None)
        return f"{self.kind}:{self.place or top}:{self.call}"


def parse_dump(text: str) -> list[Thread]:
    threads: list[Thread] = []
    head: re.Match | None = None
    frames: list[Frame] = []

    def close() -> None:
        if head is not None:
            tid = head["tid"]
            threads.append(Thread(int(tid, 16) if tid.startswith("0x") else int(tid), head["name"] or "",
                                  "active" in head["status"], tuple(frames)))

    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread:
            close()
            head, frames = thread, []
            continue
        frame = _FRAME.match(line) if head is not None else None
        if frame:
            py = _PY_WHERE.match(frame["where"])
            frames.append(Frame(frame["func"], py["file"], int(py["line"])) if py
                          else Frame(frame["func"], frame["where"]))
    close()
    return threads


def main_thread(threads: list[Thread], pid: int) -> Thread | None:
    return (next((t for t in threads if t.tid == pid), None)
            or next((t for t in threads if t.name == "MainThread"), None)
            or (threads[0] if threads else None))


def is_library(path: str) -> bool:
    """Is this Python file not the user's (a package, the standard library, frozen)?"""
    if _SITE.search(path):
        return True
    if not path.startswith("/"):  # py-spy's short names: "torch/distributed/distributed_c10d.py", "threading.py"
        root = path.split("/", 1)[0].removesuffix(".py")
        return root in _LIBRARY_ROOTS or root in sys.stdlib_module_names
    return False


def short(path: str) -> str:
    """A file as a person names it: after site-packages, else its last two parts."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return "/".join(path.rsplit("/", 2)[-2:]) if path.count("/") > 1 else path.lstrip("/")


def parse_stat(text: str) -> tuple[str, int]:
    """/proc/<pid>/stat -> (state, utime + stime). The command name may hold spaces and parentheses:
    the fields are those after its last ')'."""
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[11]) + int(fields[12])


def where(reading: RankReading) -> Where:
    """Where one rank is, from its dump and its /proc samples."""
    thread = main_thread(parse_dump(reading.dump), reading.pid) if reading.dump else None
    frames = thread.frames if thread is not None else ()
    kept = (tuple(frames[:NATIVE_KEPT]) + tuple(f for f in frames[NATIVE_KEPT:] if not f.native))[:MAX_FRAMES]
    blocked = reading.proc is not None and (reading.proc.state == "D" or reading.proc.blocked_threads > 0)
    python = [f for f in frames if not f.native]
    user = next((f for f in python if not is_library(f.file)), None)
    place = f"{short(user.file)}:{user.line} ({user.func})" if user is not None else None
    dist = [f for f in python if _DISTRIBUTED.search(f.file)]
    collective = next((f.func for f in dist if f.func in COLLECTIVES), dist[0].func if dist else None)
    above = []  # native frames above the innermost Python frame
    for f in frames:
        if not f.native:
            break
        above.append(f)
    if collective is None and any("Reducer" in f.func for f in above):
        collective = "all_reduce (DDP gradients)"  # DDP's reducer waits for the gradients' all_reduce in backward
    elif collective is None and not above and python and _AUTOGRAD.search(python[0].file) and _idle(reading):
        # In autograd's backward with no native frames read (py-spy's --native failed or was not run) and hardly
        # any CPU between the two /proc samples (_idle): waiting, and in a DDP job backward waits only
        # for the gradients' all_reduce. A rank computing its backward uses CPU, and stays "library".
        collective = "all_reduce (DDP gradients)"
    elif collective is None and any(_NATIVE_COLLECTIVE.search(f.func + " " + f.file) for f in above):
        collective = "wait"  # a work handle's wait() called from Python: only the native frames say so
    if collective is not None:
        return Where("collective", kept, collective=collective, place=place)
    foreign = [f for f in above if not _INTERPRETER_LIB.search(f.file.rsplit("/", 1)[-1])
               and not _C_SOURCE.search(f.file)]
    named = next((f for f in above if not f.func.startswith("0x")), None)
    if blocked:
        call = f"{named.func} in {_base(named.file)}" if named is not None else None
        return Where("native", kept, place=place, call=f"uninterruptible sleep (D){f', in {call}' if call else ''}")
    if foreign:
        through = " through ctypes" if any("ffi" in f.file or "ctypes" in f.func for f in above) else ""
        lib = next((f for f in foreign if not f.func.startswith("0x")), foreign[0])
        what = f"{named.func} in {_base(named.file)}" if named is not None else f"{lib.func} in {_base(lib.file)}"
        return Where("native", kept, place=place, call=f"{what}{through}")
    if not python:
        return Where("unknown" if not frames else "native", kept, call=str(named) if named else None)
    builtin = next((_BUILTINS[f.func] for f in above if f.func in _BUILTINS), None)
    top = python[0]
    if not is_library(top.file):
        return Where("user", kept, place=place, call=builtin)
    return Where("library", kept, place=place, call=builtin or f"{top.func} ({short(top.file)}:{top.line})")


_AUTOGRAD = re.compile(r"torch/autograd/")


USER_HZ = 100
"""Clock ticks per second in /proc/<pid>/stat (Linux's USER_HZ, 100 on every architecture it exports)."""
IDLE_SHARE = 0.1
"""At most this share of one CPU between the two /proc samples is idle. utime + stime are the whole process's:
a waiting rank's background threads (gloo's pairs, the watchdog, py-spy's own attach) take a tick or two (seen:
1 tick in 0.5 s for a DDP victim under load, which a zero threshold took for compute), while a rank computing its
backward takes most of a core, and a fifth of one even with four runnable processes per core."""


def _idle(reading: RankReading) -> bool:
    """Asleep at the second /proc sample with hardly any CPU used between the two (IDLE_SHARE), and not in
    uninterruptible sleep."""
    proc = reading.proc
    return proc is not None and proc.state == "S" and proc.blocked_threads == 0 \
        and proc.cpu_ticks <= IDLE_SHARE * proc.interval_s * USER_HZ


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]
