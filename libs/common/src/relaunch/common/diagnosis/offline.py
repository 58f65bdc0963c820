"""Classifying whole log files offline (`relaunch classify`): the detector's own scanner and
classifier over a stream, so the command line and the service agree on what a log means.
No server, no bus: the only I/O is reading the stream handed in (and the scan engine's cache).

Speed: with a line finder (Hyperscan), the costly work on a block (the engine's search, which
releases the GIL, and counting its lines) is independent of other blocks, so it runs on a few
threads ahead of the reader while the matches are consumed in order on the caller's thread.
Blocks are read into a ring of reused buffers (blocks.iter_reused_blocks: no fresh object or copy per
block), 2 x threads + 3 of 512 KiB (2 MiB when lines are not counted; MAX_THREADS = 4): memory stays
bounded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, TypeVar

from ..progress.watch import watched
from .blocks import (MAX_LINE_BYTES, MAX_READ, REUSED_BLOCK_BYTES, UNCOUNTED_BLOCK_BYTES, iter_byte_blocks,
                     iter_reused_blocks)
from .classifying import Classification, classify
from .scanning import Scanner
from .verdicts import choose
from . import scanner_cache
from .scan_engines import Engine, with_engine

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 4
"""More threads than this gain nothing: reading and matching on the caller's thread set the pace."""
SPOOL_IN_MEMORY = 64 << 20
"""A piped log is kept in memory up to this size, and in a temporary file beyond it."""


def load_scanner(extra_signature_files: list[str] | None = None, engine: Engine = "auto") -> Scanner:
    """The built-in catalogue, after the operator's files, with the scan engine asked for (raises
    CatalogueError, OSError, or scan_engines.EngineUnavailable when Hyperscan is asked for by name).
    The scanner comes from the cache between runs when its inputs have not changed (scanner_cache)."""
    return with_engine(scanner_cache.load(list(extra_signature_files or [])), engine)


def verdict_of_stream(stream: BinaryIO, scanner: Scanner, threads: int | None = None,
                      line_numbers: bool = True) -> Classification | None:
    """What the live detector would make of one log (verdicts.py): its signatures' root cause, or the
    divergence its progress lines show, whichever comes first. The progress lines are replayed
    (progress.replay) only when the scan saw a line that can start a divergence (replay.WATCH, which
    the scan engine looks for with the signatures): a healthy log costs no second read. A stream that
    cannot seek (a pipe) is kept aside while it is scanned, so that it can be read again."""
    if not _seekable(stream):
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
            shutil.copyfileobj(stream, spool, MAX_READ)
            spool.seek(0)
            return verdict_of_stream(spool, scanner, threads, line_numbers)
    start = stream.tell()
    seen: list[bool] = []

    def watch(text: str) -> None:
        if not seen and watched(text):
            seen.append(True)

    crash = classify_stream(stream, scanner, threads, line_numbers, on_text=watch)
    if not seen:
        return crash
    from ..progress.replay import divergence_in  # (the parsers: imported only for a log that needs them)

    stream.seek(start)
    positions = scanner.line_finder is not None and not line_numbers
    size = UNCOUNTED_BLOCK_BYTES if positions else REUSED_BLOCK_BYTES
    return choose(crash, divergence_in(_numbered_lines(stream, size, positions)))


def classify_stream(stream: BinaryIO, scanner: Scanner, threads: int | None = None,
                    line_numbers: bool = True, on_text: Callable[[str], object] | None = None
                    ) -> Classification | None:
    """The root cause of one log, read block by block (memory stays bounded on huge files).
    line_numbers=False: the evidence's index is a position in the stream, not a line number, and with a
    line finder the lines are not counted (`relaunch classify --json` prints no line numbers).
    `on_text`: Scanner.scan_prepared's."""
    if scanner.line_finder is None:  # Python matches every block whole: smaller blocks, less memory
        return classify(scanner.scan_bytes(iter_byte_blocks(stream, MAX_READ), MAX_LINE_BYTES, on_text))
    workers = _threads() if threads is None else threads

    def prepare(block: tuple[bytes | bytearray, int]):
        return scanner.prepare_block(*block, count_lines=line_numbers)

    size = REUSED_BLOCK_BYTES if line_numbers else UNCOUNTED_BLOCK_BYTES
    if workers <= 1:
        return classify(scanner.scan_prepared(map(prepare, iter_reused_blocks(stream, 3, size)), MAX_LINE_BYTES,
                                              line_numbers, on_text))
    ahead = 2 * workers
    # A buffer is reused `ring` blocks after it was read: by then the `ahead` blocks in flight, the one
    # being matched and the one being read are others.
    blocks = iter_reused_blocks(stream, ahead + 3, size)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relaunch-scan") as pool:
        prepared = ordered_map(pool.submit, prepare, blocks, ahead=ahead)
        return classify(scanner.scan_prepared(prepared, MAX_LINE_BYTES, line_numbers, on_text))


def _numbered_lines(stream: BinaryIO, size: int, positions: bool) -> Iterator[tuple[int, str]]:
    """Every line of the stream, cut and decoded as the scan cuts them, with the index the scan gives
    its matches: the line number, or (positions) the line's offset in the blocks read with `size`
    (the scan's positions: an over-long line is cut the same way in both)."""
    index = offset = 0
    for data, length in iter_reused_blocks(stream, 3, size):
        block = bytes(memoryview(data)[:length])
        start = 0
        for raw in block.split(b"\n")[: -1 if block.endswith(b"\n") else None]:
            yield (offset + start if positions else index), raw[:MAX_LINE_BYTES].decode("utf-8", "replace")
            index += 1
            start += len(raw) + 1
        offset += length


def _seekable(stream: BinaryIO) -> bool:
    try:
        return bool(stream.seekable()) and stream.tell() >= 0
    except (AttributeError, OSError, ValueError):
        return False


def ordered_map(submit: Callable, fn: Callable[[T], R], items: Iterable[T], ahead: int) -> Iterator[R]:
    """fn over items on a pool, results in order, at most `ahead` submitted and not yet consumed
    (Executor.map would read the whole input first)."""
    pending: deque = deque()
    for item in items:
        pending.append(submit(fn, item))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_THREADS))
