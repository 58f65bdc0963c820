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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, TypeVar

from .blocks import (MAX_LINE_BYTES, MAX_READ, REUSED_BLOCK_BYTES, UNCOUNTED_BLOCK_BYTES, iter_byte_blocks,
                     iter_reused_blocks)
from .classifying import Classification, classify
from .scanning import Scanner
from . import scanner_cache
from .scan_engines import Engine, with_engine

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 4
"""More threads than this gain nothing: reading and matching on the caller's thread set the pace."""


def load_scanner(extra_signature_files: list[str] | None = None, engine: Engine = "auto") -> Scanner:
    """The built-in catalogue, after the operator's files, with the scan engine asked for (raises
    CatalogueError, OSError, or scan_engines.EngineUnavailable when Hyperscan is asked for by name).
    The scanner comes from the cache between runs when its inputs have not changed (scanner_cache)."""
    return with_engine(scanner_cache.load(list(extra_signature_files or [])), engine)


def classify_stream(stream: BinaryIO, scanner: Scanner, threads: int | None = None,
                    line_numbers: bool = True) -> Classification | None:
    """The root cause of one log, read block by block (memory stays bounded on huge files).
    line_numbers=False: the evidence's index is a position in the stream, not a line number, and with a
    line finder the lines are not counted (`relaunch classify --json` prints no line numbers)."""
    if scanner.line_finder is None:  # Python matches every block whole: smaller blocks, less memory
        return classify(scanner.scan_bytes(iter_byte_blocks(stream, MAX_READ), MAX_LINE_BYTES))
    workers = _threads() if threads is None else threads

    def prepare(block: tuple[bytes | bytearray, int]):
        return scanner.prepare_block(*block, count_lines=line_numbers)

    size = REUSED_BLOCK_BYTES if line_numbers else UNCOUNTED_BLOCK_BYTES
    if workers <= 1:
        return classify(scanner.scan_prepared(map(prepare, iter_reused_blocks(stream, 3, size)), MAX_LINE_BYTES,
                                              line_numbers))
    ahead = 2 * workers
    # A buffer is reused `ring` blocks after it was read: by then the `ahead` blocks in flight, the one
    # being matched and the one being read are others.
    blocks = iter_reused_blocks(stream, ahead + 3, size)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="relaunch-scan") as pool:
        prepared = ordered_map(pool.submit, prepare, blocks, ahead=ahead)
        return classify(scanner.scan_prepared(prepared, MAX_LINE_BYTES, line_numbers))


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
