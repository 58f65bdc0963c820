"""The C allocator under the detector (glibc's malloc): the one setting the detector makes of it
(docs/architecture.md, "Scale").

glibc serves a block of at least its mmap threshold (128 KiB to start with) with a mapping of its own,
given back to the system when freed, and serves smaller ones from its heap. But its threshold is dynamic:
every mapped block freed raises it to that block's size, up to 32 MiB. The detector makes large
short-lived blocks all the time (a batch's Redis commands, the follower's list of every followed file);
once the threshold has risen they come from the heap, between the jobs' long-lived states, and the
heap keeps the pages they took after they are freed. Fixing the threshold keeps them out of the heap.
Measured in bench/load.py at 10,000 jobs (docs/architecture.md, "Scale")."""

from __future__ import annotations

import ctypes
import os

M_MMAP_THRESHOLD = -3
"""mallopt's parameter number for the mmap threshold (malloc.h); setting it turns the dynamic threshold off."""
ENVIRONMENT = "MALLOC_MMAP_THRESHOLD_"
"""glibc's own environment variable for the same setting: where an operator set it, it stands."""


def fix_mmap_threshold(nbytes: int) -> bool:
    """Fix glibc's mmap threshold at `nbytes`. Returns whether it was set: not for 0 or less (glibc's
    dynamic threshold stays), not where MALLOC_MMAP_THRESHOLD_ is set, and not under another C library
    (musl or macOS: no mallopt, or one that sets nothing)."""
    if nbytes <= 0 or ENVIRONMENT in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, nbytes) == 1
