"""Reading a whole log file or pipe as blocks that end at line ends, with bounded memory (offline
classification, `relaunch classify`; the detector's follower reads at offsets instead,
relaunch.detector.adapters.logfiles).

A line is cut at MAX_LINE_BYTES; of an over-long line only its head is kept, so one 10 MB line costs
bounded memory and time. Bytes are decoded as UTF-8 with replacement (binary junk never raises).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from .scanning import decoded_lines

MAX_READ = 1 << 20
"""Bytes read at a time by the follower, and the block size of the Python-only offline path."""
MAX_LINE_BYTES = 8192
"""A line is cut here (the scanner matches at most the first MAX_LINE characters of it anyway)."""
BLOCK_BYTES = 8 << 20
"""Offline reads: large enough that a scan engine's per-call cost vanishes, small enough to bound memory."""
REUSED_BLOCK_BYTES = 512 << 10
"""Offline reads into reused buffers: small enough that a block the engine has just searched is still in
the CPU's cache when its lines are counted, large enough that the engine's per-call cost vanishes."""
UNCOUNTED_BLOCK_BYTES = 2 << 20
"""Offline reads whose lines are not counted (`relaunch classify --json`): nothing reads a block twice,
so larger blocks only save per-block hand-offs between the reader and the scan threads."""


def iter_text_blocks(stream: BinaryIO, block_bytes: int = MAX_READ,
                     max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """A whole file or pipe as decoded text blocks that end at line ends (see iter_byte_blocks); every
    line is cut at `max_line_bytes` and decoded as UTF-8 with replacement, so binary junk never raises."""
    for block in iter_byte_blocks(stream, block_bytes, max_line_bytes):
        yield decoded_lines(block, max_line_bytes)


def iter_byte_blocks(stream: BinaryIO, block_bytes: int = BLOCK_BYTES,
                     max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """A whole file or pipe as raw blocks that end at line ends, read `block_bytes` at a time (memory
    stays bounded on 500 MB files). A carriage return ends a line too: progress bars redraw with it,
    and an error printed after a long progress bar would otherwise sit past the cut. A line longer than
    `max_line_bytes` that runs past a read keeps only its head (the rest is dropped unread into
    memory); within a block lines are left whole, for the consumer to cut (Scanner.scan_bytes)."""
    # One buffer, read into and reused: the unfinished line is moved to its front and the next read
    # lands after it, so a block is copied out once (fresh 8 MiB objects per read cost page faults).
    buf = bytearray(block_bytes + max_line_bytes)
    view = memoryview(buf)
    kept = 0  # bytes of the unfinished line at the front of buf, at most max_line_bytes
    dropping = False  # the unfinished line is over-long: skip up to its end
    while n := _read_into(stream, view[kept: kept + block_bytes]):
        filled = kept + n
        if buf.find(b"\r", kept, filled) >= 0:  # a search first: most logs have none to replace
            buf[kept:filled] = buf[kept:filled].replace(b"\r", b"\n")
        last = buf.rfind(b"\n", kept, filled)
        if last < 0:
            if not dropping:
                kept = filled
                if kept > max_line_bytes:
                    kept, dropping = max_line_bytes, True
            continue
        if dropping:  # the over-long line's rest, up to its newline, is dropped
            yield bytes(view[:kept]) + bytes(view[buf.find(b"\n", kept, filled): last + 1])
        else:
            yield bytes(view[: last + 1])
        tail = filled - last - 1
        kept, dropping = min(tail, max_line_bytes), tail > max_line_bytes
        buf[:kept] = bytes(view[last + 1: last + 1 + kept])  # a copy: the two ranges may overlap
    if kept:
        yield bytes(view[:kept])


def iter_reused_blocks(stream: BinaryIO, ring: int, block_bytes: int = REUSED_BLOCK_BYTES,
                       max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[bytes | bytearray, int]]:
    """iter_byte_blocks' blocks as (buffer, length): the block is buffer[:length], and the buffer is one
    of `ring` reused ones (no fresh object, no copy per block: a 600 MB log is read at about the speed
    of the page cache). A buffer is written again `ring` blocks later, so a consumer holding at most
    ring - 2 blocks it has not finished with may keep them without copying. The same blocks as
    iter_byte_blocks, cut the same way (the rare block holding the rest of an over-long line is a
    fresh bytes object)."""
    buffers = [bytearray(block_bytes + max_line_bytes) for _ in range(max(ring, 2))]
    turn, buf = 0, buffers[0]
    kept, dropping = 0, False
    while n := _read_into(stream, memoryview(buf)[kept: kept + block_bytes]):
        filled = kept + n
        if buf.find(b"\r", kept, filled) >= 0:
            buf[kept:filled] = buf[kept:filled].replace(b"\r", b"\n")
        last = buf.rfind(b"\n", kept, filled)
        if last < 0:
            if not dropping:
                kept = filled
                if kept > max_line_bytes:
                    kept, dropping = max_line_bytes, True
            continue
        turn += 1
        following = buffers[turn % len(buffers)]
        tail = filled - last - 1
        carried = min(tail, max_line_bytes)
        memoryview(following)[:carried] = memoryview(buf)[last + 1: last + 1 + carried]
        if dropping:  # the over-long line's rest, up to its newline, is dropped
            block = bytes(buf[:kept]) + bytes(buf[buf.find(b"\n", kept, filled): last + 1])
            yield block, len(block)
        else:
            yield buf, last + 1
        kept, dropping, buf = carried, tail > max_line_bytes, following
    if kept:
        yield buf, kept


def _read_into(stream: BinaryIO, target: memoryview) -> int:
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        return readinto(target) or 0
    # A stream with read() only (text standard input re-encoded) may return up to 4 bytes per
    # character asked for: ask for few enough that they fit.
    data = stream.read(max(len(target) // 4, 1))
    target[: len(data)] = data
    return len(data)
