"""Reading log files: new lines of a job's file at a byte offset, bounded in size (the follower), and
a whole file or pipe as text blocks (offline classification). The only file reader.

A line is cut at MAX_LINE_BYTES; of an over-long line only the head of each read (1 MiB) is kept,
so one 10 MB line costs bounded memory and time and yields about ten pieces. Bytes are decoded as UTF-8 with replacement (binary junk
never raises). A trailing partial line is left for the next read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAX_READ = 1 << 20
MAX_LINE_BYTES = 8192


@dataclass(frozen=True)
class Chunk:
    offset: int
    """Byte offset of the first line."""
    lines: list[str]
    ends: list[int]
    """Byte offset just past each line (exact, whatever decoding or cutting did to the text)."""
    next_offset: int


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
    """A whole file or pipe as decoded text blocks that end at line ends, read `block_bytes` at a time
    (memory stays bounded on 500 MB files). A carriage return ends a line too: progress bars redraw
    with it, and an error printed after a long progress bar would otherwise sit past the cut. Every
    line is cut at `max_line_bytes` (the rest of it is dropped unread into memory) and decoded as
    UTF-8 with replacement, so binary junk never raises."""
    pending = b""  # the unfinished line carried to the next read, at most max_line_bytes of it
    dropping = False  # the unfinished line is over-long: skip up to its end
    while chunk := stream.read(block_bytes):
        chunk = chunk.replace(b"\r", b"\n")
        last = chunk.rfind(b"\n")
        if last < 0:
            if not dropping:
                pending += chunk
                if len(pending) > max_line_bytes:
                    pending, dropping = pending[:max_line_bytes], True
            continue
        body = chunk[: last + 1]
        if dropping:
            body = body[body.find(b"\n"):]  # the over-long line's rest, up to its newline, is dropped
        tail = chunk[last + 1:]
        yield _decoded(pending + body, max_line_bytes)
        pending, dropping = tail[:max_line_bytes], len(tail) > max_line_bytes
    if pending:
        yield _decoded(pending, max_line_bytes)


def _decoded(data: bytes, max_line_bytes: int) -> str:
    parts = data.split(b"\n")
    if max(map(len, parts)) > max_line_bytes:
        data = b"\n".join(part[:max_line_bytes] for part in parts)
    return data.decode("utf-8", "replace")
