"""The scanner `relaunch classify` builds, kept on disk between runs: building it (parsing the
catalogue, checking every pattern against its examples and for backtracking, deriving the keywords of
~450 patterns) costs a few hundred milliseconds of a command whose start-up is benchmarked; reading
it back costs compiling its patterns only.

- Keyed by everything the scanner is derived from: the built-in signatures.toml, the operator's
  files (their bytes), the source of the modules that parse and derive (signatures, pattern_analysis,
  scanning) and the Python version. A changed input names another file; an old one is never read.
- Stored next to the Hyperscan databases ($XDG_CACHE_HOME or ~/.cache, relaunch/scanner), written
  aside and renamed; the newest KEEP_CACHED kept. A file that cannot be read, written or unpickled
  only makes that start slower.
- Patterns are stored as their source and flags and come back as LazyPattern, compiled at first
  use: a run on a healthy log needs only the few its candidate lines reach (compiling all ~450 costs
  ~0.2 s here, which the cache would otherwise only move from parsing to loading).
- Read with an unpickler that builds only the catalogue's own classes, lazy patterns and plain
  containers: a file in the cache cannot make the command run anything else.
- Errors in a catalogue are never cached: a bad file is parsed (and refused) on every run.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import re
import sys
from pathlib import Path

from . import pattern_analysis, scanning, signatures
from .scanning import Scanner, scanner_for
from .signatures import load_catalogue

log = logging.getLogger(__name__)

KEEP_CACHED = 8
_LOADED: dict[str, Scanner] = {}
_FORMAT = b"relaunch-scanner-1"
_ALLOWED = {
    ("relaunch.common.diagnosis.scanner_cache", "LazyPattern"), ("builtins", "frozenset"), ("builtins", "set"), ("builtins", "dict"),
    ("builtins", "tuple"), ("builtins", "list"),
    ("relaunch.common.diagnosis.signatures", "Signature"), ("relaunch.common.diagnosis.signatures", "Locator"),
    ("relaunch.common.diagnosis.signatures", "Catalogue"), ("relaunch.common.diagnosis.scanning", "Scanner"),
}


def load(extra_signature_files: list[str], cache_dir: Path | None = None) -> Scanner:
    """The scanner of the built-in catalogue after these operator files: from the cache when it holds
    it, else built (raising CatalogueError or OSError as load_catalogue does) and cached."""
    try:
        key = _key(extra_signature_files)
    except OSError:  # an operator file cannot be read: load_catalogue says so
        return scanner_for(load_catalogue(list(extra_signature_files)))
    if key in _LOADED:  # once per process: a scanner is immutable, and engines are cached per scanner
        return _LOADED[key]
    path = (cache_dir or _default_cache_dir()) / f"{key}.pickle"
    scanner = _read(path)
    if scanner is None:
        # Parsed again from the file the key was made from: a process that parsed the built-in catalogue
        # before the file changed (a checkout updated under it) would otherwise write its old scanner
        # under the new file's key, for every later process to load.
        signatures.builtin_catalogue.cache_clear()
        scanner = scanner_for(load_catalogue(list(extra_signature_files)))
        _write(path, scanner)
    _LOADED[key] = scanner
    return scanner


def _key(extra_signature_files: list[str]) -> str:
    digest = hashlib.sha256(_FORMAT + sys.version.encode())
    for module in (signatures, pattern_analysis, scanning, sys.modules[__name__]):
        digest.update(b"\0" + Path(module.__file__).read_bytes())
    digest.update(b"\0" + signatures.BUILTIN_FILE.read_bytes())
    for name in extra_signature_files:
        digest.update(b"\0%d\0" % len(name) + name.encode("utf-8", "surrogateescape") + Path(name).read_bytes())
    return digest.hexdigest()


class LazyPattern:
    """A compiled pattern's stand-in that compiles at first use: its `pattern` and `flags` at once
    (what the engines' translation reads), everything else (`search`, `groupindex`...) from the
    compiled pattern."""

    __slots__ = ("pattern", "flags", "_compiled")

    def __init__(self, pattern: str, flags: int) -> None:
        self.pattern, self.flags, self._compiled = pattern, flags, None

    def _get(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, string: str, *args):
        return self._get().search(string, *args)

    def __getattr__(self, name: str):
        return getattr(self._get(), name)

    def __reduce__(self):
        return LazyPattern, (self.pattern, self.flags)


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, re.Pattern):
            return LazyPattern, (obj.pattern, obj.flags)
        return NotImplemented


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a scanner")
        return super().find_class(module, name)


def _read(path: Path) -> Scanner | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        scanner = _Restricted(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any bad file (truncated, tampered, another layout): rebuild
        log.debug("scanner cache %s not used: %s", path, exc)
        return None
    return scanner if isinstance(scanner, Scanner) else None


def _write(path: Path, scanner: Scanner) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # only when the cache is written

        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            _Pickler(tmp, protocol=pickle.HIGHEST_PROTOCOL).dump(scanner)
        os.replace(tmp.name, path)
        by_age = sorted(path.parent.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in by_age[KEEP_CACHED:]:
            stale.unlink(missing_ok=True)
    except (OSError, pickle.PicklingError) as exc:
        log.debug("scanner cache %s not written: %s", path, exc)
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "relaunch" / "scanner"
