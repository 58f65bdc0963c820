"""Hyperscan as the scanner's line finder: the only importer of `hyperscan`.

One block-mode database holds the byte supersets of the catalogue's patterns (byte_patterns.py);
a scan of a block reports where they end, and each end names the line that holds it. Those lines go to
the exact Python match (Scanner.scan_bytes), so Hyperscan only decides which lines are worth it.

- Compiling takes about a second; the serialised database is cached on disk ($XDG_CACHE_HOME or
  ~/.cache, under relaunch/hyperscan; the newest KEEP_CACHED kept), keyed by the patterns, the
  translation's code and the library's version, so after the first run the engine is ready in
  milliseconds. A cache that cannot be read, written or loaded (another CPU, another version) only
  makes that start slower.
- The supersets are compiled as they are; if Hyperscan refuses one (a resource limit), its prefilter
  mode, which may widen a pattern further, and if that fails too the caller uses Python.
- Hyperscan does not promise to report matches in offset order, so every end in a block is collected
  and sorted. A block with more than MAX_ENDS of them (hostile input: one pattern matching at
  every byte of a huge line) is left to the Python path, whose cost per line is bounded.
- Scanning releases the GIL, so blocks may be searched on several threads at once; Hyperscan's
  scratch space must not be shared by concurrent scans, so each thread gets its own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import hyperscan

log = logging.getLogger(__name__)

MAX_ENDS = 1 << 16
KEEP_CACHED = 8
"""Databases kept in the cache directory (each catalogue or translation change adds one)."""
_FLAGS = hyperscan.HS_FLAG_MULTILINE  # ^ is a line start: blocks hold many lines
_CACHE_FORMAT = b"relaunch-hyperscan-1"


class EngineError(RuntimeError):
    """The catalogue cannot be compiled for Hyperscan: the caller falls back to the Python finder."""


class HyperscanLineFinder:
    def __init__(self, database: hyperscan.Database) -> None:
        self._database = database
        self._local = threading.local()

    def _scratch(self) -> hyperscan.Scratch:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch

    def __call__(self, block: bytes | bytearray, length: int | None = None) -> list[tuple[int, int]] | None:
        """The lines of block[:length] (all of it by default) that may match; None: too many to say."""
        size = len(block) if length is None else length
        ends: list[int] = []

        def on_match(_id: int, _start: int, end: int, _flags: int, _context: object) -> bool:
            ends.append(end)
            return len(ends) >= MAX_ENDS  # true stops the scan

        try:
            self._database.scan(block if size == len(block) else memoryview(block)[:size],
                                match_event_handler=on_match, scratch=self._scratch())
        except hyperscan.ScanTerminated:
            return None
        spans, line_end = [], -1
        for end in sorted(ends):
            if end <= line_end:
                continue  # another match on a line already taken
            # Matches never hold a newline (the supersets exclude it), so the line is the one
            # around the match's last byte.
            start = block.rfind(b"\n", 0, end - 1) + 1
            line_end = block.find(b"\n", end - 1, size)
            line_end = size if line_end < 0 else line_end
            spans.append((start, line_end))
        return spans


def line_finder(key: str, sources: Callable[[], list[bytes]], cache_dir: Path | None = None) -> HyperscanLineFinder:
    """A finder for the superset sources that `key` names (byte_patterns.translation_key), from the
    cache when it holds them, else compiled from `sources()` and cached. Raises EngineError."""
    name = hashlib.sha256(b"\0".join([_CACHE_FORMAT, _version().encode(), key.encode()])).hexdigest()
    path = (cache_dir or _default_cache_dir()) / f"{name}.db"
    database = _load(path)
    if database is None:
        database = _compile(sources())
        _store(path, database)
    return HyperscanLineFinder(database)


def _version() -> str:
    return getattr(hyperscan, "__version__", "unknown")


def _compile(sources: list[bytes]) -> hyperscan.Database:
    """Exact supersets first; if Hyperscan refuses one (a resource limit: a large bounded repeat), its
    prefilter mode, which may widen a pattern further and so still gives a superset."""
    for flags in (_FLAGS, _FLAGS | hyperscan.HS_FLAG_PREFILTER):
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        try:
            database.compile(expressions=sources, ids=list(range(len(sources))), flags=flags)
            return database
        except hyperscan.error as exc:
            error = exc
    raise EngineError(f"Hyperscan cannot compile the catalogue: {_culprit(sources) or error}")


def _culprit(sources: list[bytes]) -> str | None:
    """Which source Hyperscan refuses, compiled one by one (only on the error path: it is slow)."""
    for source in sources:
        try:
            hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(
                expressions=[source], flags=_FLAGS | hyperscan.HS_FLAG_PREFILTER)
        except hyperscan.error as exc:
            return f"{exc} in {source[:200]!r}"
    return None


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "relaunch" / "hyperscan"


def _load(path: Path) -> hyperscan.Database | None:
    try:
        database = hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
        # A database built on another CPU (a home directory shared across nodes) may load and only
        # fail when it scans: try it once here rather than in the middle of a log.
        database.scan(b"probe\n", match_event_handler=lambda *_: None, scratch=hyperscan.Scratch(database))
        return database
    except (OSError, hyperscan.error) as exc:  # absent, unreadable, or built for another CPU or version
        if not isinstance(exc, FileNotFoundError):
            log.debug("hyperscan cache %s not used: %s", path, exc)
        return None


def _store(path: Path, database: hyperscan.Database) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: two processes starting at once never read half a file.
        import tempfile  # only when the cache is written

        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            tmp.write(hyperscan.dumpb(database))
        os.replace(tmp.name, path)
        _prune(path.parent)
    except OSError as exc:
        log.debug("hyperscan cache %s not written: %s", path, exc)
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)


def _prune(directory: Path) -> None:
    """Keeps the KEEP_CACHED most recently written databases (a race with another process pruning
    at the same time only makes an unlink fail, which is ignored)."""
    by_age = sorted(directory.glob("*.db"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in by_age[KEEP_CACHED:]:
        stale.unlink(missing_ok=True)
