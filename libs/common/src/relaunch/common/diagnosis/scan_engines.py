"""Which engine finds the lines worth matching: Hyperscan when it is installed and compiles the
catalogue, else the pure-Python keyword finder. Both give the same results (scanning.py); the
choice only changes speed, so a failure to set up Hyperscan is a warning, never an error, unless the
caller asked for Hyperscan by name.

The choice is logged once per catalogue and engine (scanners are cached), at INFO when it is the one
asked for and at WARNING when falling back.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import re
from pathlib import Path
from typing import Literal

from ..progress.watch import WATCH_SOURCES
from .scanning import Scanner, scanner_for
from .signatures import Catalogue

log = logging.getLogger(__name__)

Engine = Literal["auto", "hyperscan", "python"]
ENGINES: tuple[Engine, ...] = ("auto", "hyperscan", "python")


def superset_sources(patterns: list[re.Pattern[str]]) -> list[bytes]:
    """byte_patterns.superset_sources, imported only when a database is compiled (a cache miss)."""
    from .byte_patterns import superset_sources as translate

    return translate(patterns)


_TRANSLATION = Path(__file__).with_name("byte_patterns.py")
"""The translating module's source (translation_key), read without importing it."""


class EngineUnavailable(RuntimeError):
    """Hyperscan was asked for by name and cannot be used."""


def hyperscan_importable() -> bool:
    """Whether the hyperscan package is installed (found, not imported: the adapter imports it)."""
    return importlib.util.find_spec("hyperscan") is not None


@functools.lru_cache(maxsize=16)
def scanner_with_engine(catalogue: Catalogue, engine: Engine = "auto") -> Scanner:
    return _with_engine(scanner_for(catalogue), engine)


@functools.lru_cache(maxsize=16)
def with_engine(scanner: Scanner, engine: Engine = "auto") -> Scanner:
    """The scanner with the line finder of the engine asked for (cached per scanner object)."""
    return _with_engine(scanner, engine)


def _with_engine(scanner: Scanner, engine: Engine) -> Scanner:
    if engine == "python":
        log.info("scan engine: python (asked for)")
        return scanner
    try:
        # Imported here: hyperscan is optional, and the import costs start-up time only when used.
        from .hyperscan_engine import EngineError, line_finder
    except (ImportError, OSError) as exc:  # OSError: the extension's shared library cannot load
        return _fallback(scanner, engine, f"hyperscan is not installed ({exc})")
    try:
        # The lines progress.replay must see go through the line finder too (offline.verdict_of_stream):
        # one pass of the engine over a block finds both.
        patterns = scanner.explaining_patterns()
        finder = line_finder(translation_key(patterns), lambda: superset_sources(patterns) + WATCH_SOURCES)
    except Exception as exc:
        from .byte_patterns import Untranslatable  # the translation's own error (a cached database needs none)

        if not isinstance(exc, (EngineError, Untranslatable)):
            raise
        return _fallback(scanner, engine, str(exc))
    log.info("scan engine: hyperscan")
    return scanner.with_line_finder(finder, "hyperscan")


def translation_key(patterns: list[re.Pattern[str]]) -> str:
    """Names what superset_sources(patterns) returns without computing it (the translation costs a
    few hundred milliseconds, a cache lookup nothing): the patterns, and the translating module's
    own text, so that changing the translation never finds a stale database; and progress.watch's
    WATCH_SOURCES, which the database holds as they are."""
    try:
        digest = hashlib.sha256(_TRANSLATION.read_bytes())
    except OSError:  # pragma: no cover - installed without source files: the patterns alone
        digest = hashlib.sha256(b"relaunch.common.diagnosis.byte_patterns")
    for pattern in patterns:
        digest.update(b"\0%d\0" % pattern.flags + pattern.pattern.encode("utf-8", "surrogatepass"))
    for source in WATCH_SOURCES:  # added to the database as they are
        digest.update(b"\0watch\0" + source)
    return digest.hexdigest()


def _fallback(scanner: Scanner, engine: Engine, why: str) -> Scanner:
    if engine == "hyperscan":
        raise EngineUnavailable(why)
    log.warning("scan engine: python, slower, same results (%s)", why)
    return scanner
