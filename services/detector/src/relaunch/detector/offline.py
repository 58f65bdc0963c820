"""Classifying whole log files offline (`relaunch classify`): the detector's own scanner and
classifier over a stream, so the command line and the service agree on what a log means.
No server, no bus: the only I/O is reading the stream handed in."""

from __future__ import annotations

from typing import BinaryIO

from .adapters.logfiles import iter_text_blocks
from .domain.classifying import Classification, classify
from .domain.scanning import Scanner, scanner_for
from .domain.signatures import load_catalogue


def load_scanner(extra_signature_files: list[str] | None = None) -> Scanner:
    """The built-in catalogue, after the operator's files (raises CatalogueError or OSError)."""
    return scanner_for(load_catalogue(list(extra_signature_files or [])))


def classify_stream(stream: BinaryIO, scanner: Scanner) -> Classification | None:
    """The root cause of one log, read block by block (memory stays bounded on huge files)."""
    return classify(scanner.scan_text(iter_text_blocks(stream)))
