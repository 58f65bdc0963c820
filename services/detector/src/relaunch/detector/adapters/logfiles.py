"""Reading a job's log files: new lines at a byte offset, bounded in size (the follower); the detector's
only file reader (whole logs read offline: relaunch.common.diagnosis.blocks).

A line ends at '\n' or '\r' (each redraw of a progress bar is a frame of its own). A line is cut at
MAX_LINE_BYTES; of an over-long line only the head of each read (1 MiB) is kept,
so one 10 MB line costs bounded memory and time and yields about ten pieces. Bytes are decoded as
UTF-8 with replacement (binary junk never raises). A trailing partial line is left for the next read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from relaunch.common.diagnosis.blocks import MAX_LINE_BYTES, MAX_READ


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
    # A carriage return ends a frame too: tqdm and Lightning redraw their bars with '\r' and no
    # newline, so without this a whole run's bar is one endless line, cut at MAX_LINE_BYTES, and a
    # line printed after it (Slurm's "CANCELLED ... DUE TO TIME LIMIT") would be lost in the cut
    # (the offline reader splits the same way: relaunch.common.diagnosis.blocks).
    has_cr = b"\r" in data
    while consumed < len(data):
        nl = data.find(b"\n", consumed)
        if has_cr:
            cr = data.find(b"\r", consumed, nl if nl != -1 else len(data))
            if cr != -1:
                nl = cr
        if nl == -1:
            if len(data) - consumed < MAX_LINE_BYTES:
                break  # a partial line: wait for the rest
            # An over-long line: keep its head, skip the rest of this read (one piece per read).
            nl = len(data) - 1
        raw = data[consumed: nl + 1].rstrip(b"\r\n")
        consumed = nl + 1
        if not raw and has_cr and (data[nl:nl + 1] == b"\r" or data[nl - 1:nl] == b"\r"):
            if ends:
                ends[-1] = offset + consumed  # the '\n' of '\r\n', or a '\r' with nothing before it
            continue
        lines.append(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"))
        ends.append(offset + consumed)
    return Chunk(offset, lines, ends, offset + consumed)
