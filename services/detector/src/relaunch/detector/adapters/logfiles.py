"""Reading log files: new lines of a job's file at a byte offset, bounded in size (the follower), and
a whole file or pipe as raw or text blocks (offline classification). The only file reader.

A line is cut at MAX_LINE_BYTES; of an over-long line only the head of each read (1 MiB) is kept,
so one 10 MB line costs bounded memory and time and yields about ten pieces. Bytes are decoded as
UTF-8 with replacement (binary junk never raises). A trailing partial line is left for the next read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from ..domain.scanning import decoded_lines

MAX_READ = 1 << 20
MAX_LINE_BYTES = 8192
BLOCK_BYTES = 8 << 20
"""Offline reads: large enough that a scan engine's per-call cost vanishes, small enough to bound memory."""


@dataclass(frozen=True)
class Chunk:
    offset: int
    """Byte offset of the first line."""
    lines: list[str]
    ends: list[int]
    """Byte offset just past each line (exact, whatever decoding or cutting did to the text)."""
    next_offset: int


def unreadable_reason(paths: list[str]) -> str | None:
    """None when at least one of a job's log files can be read here; else why none can, in words
    an operator can act on (the Advice of a failure that nothing explains quotes it)."""
    if not paths:
        return "Slurm did not say where the job's output went"
    problems = []
    for path in paths:
        try:
            with open(path, "rb"):
                return None
        except FileNotFoundError:
            problems.append(f"{path} does not exist on the detector's host")
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
    return "; ".join(problems)


def file_sizes(paths: list[str]) -> list[int | None]:
    """The size of each file, None where it does not exist (yet) or cannot be read: one thread hop
    for all the files the follower watches, instead of one per file."""
    sizes: list[int | None] = []
    for path in paths:
        try:
            sizes.append(os.stat(path).st_size)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            sizes.append(None)
    return sizes


def read_new_lines(path: str, offset: int, max_read: int = MAX_READ) -> Chunk | None:
    """Lines completed since `offset`, or None when the file does not exist (yet)."""
    try:
        size = os.stat(path).st_size
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    if size < offset:  # truncated (a job without --open-mode=append was requeued): start over
        offset = 0
    if size == offset:
        return Chunk(offset, [], [], offset)
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(max_read)
    lines: list[str] = []
    ends: list[int] = []
    consumed = 0
    while consumed < len(data):
        nl = data.find(b"\n", consumed)
        if nl == -1:
            if len(data) - consumed < MAX_LINE_BYTES:
                break  # a partial line: wait for the rest
            # An over-long line: keep its head, skip the rest of this read (one piece per read).
            nl = len(data) - 1
        raw = data[consumed: nl + 1].rstrip(b"\r\n")
        lines.append(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"))
        consumed = nl + 1
        ends.append(offset + consumed)
    return Chunk(offset, lines, ends, offset + consumed)


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


def _read_into(stream: BinaryIO, target: memoryview) -> int:
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        return readinto(target) or 0
    # A stream with read() only (text standard input re-encoded) may return up to 4 bytes per
    # character asked for: ask for few enough that they fit.
    data = stream.read(max(len(target) // 4, 1))
    target[: len(data)] = data
    return len(data)
