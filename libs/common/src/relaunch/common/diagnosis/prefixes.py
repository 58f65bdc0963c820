"""The one normaliser of line prefixes: what launchers, loggers and containers put before a line of a
training log, taken off so that a signature or a progress parser reads the line as the program printed
it (docs/log-ingest.md, "Line prefixes", lists every format with an example). Pure.

`views(line)` gives the places in a line where a record may begin: the line's start, the end of each
known prefix in a stack of them (`15: [rank15]: ModuleNotFoundError: ...` is read from `[rank15]: ...`
and from `ModuleNotFoundError: ...`), and the records joined on one line behind a mid-line rank or Ray
worker prefix (`... INFO step 9 [rank7]: AssertionError ...`). Every view is a suffix of the line, so
a caller keeps the raw line (evidence shows it as printed) and only matches from the view's offset.

Invariants:
- the raw line is always the first view: a normalised line can only be matched in more places, never
  fewer, so a verdict that held on the raw line still holds;
- bounded time: at most MAX_LAYERS prefixes are taken off the front, at most MAX_JOINED records are
  looked for in the first MAX_SCAN characters, and no pattern nests quantifiers;
- a line with no known prefix costs one failed `match` and one `search` that finds nothing;
- a record whose prefix says it is not an error (INFO, WARNING, ...: _QUIET) offers no view behind
  that level: a logged warning naming an exception must never read as the crash itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LAYERS = 16
"""Prefixes taken off one record's front, at most (a real stack is 2 to 4 prefixes deep, of up to 4 layers
each: a timestamp, a level, a logger's location)."""
MAX_JOINED = 4
"""Records looked for behind the first one on a line."""
MAX_SCAN = 8192
"""Characters of a line looked at (the scanner's MAX_LINE)."""

_LEVEL = r"(?:DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)"
_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d|\s?UTC)?"

# One layer of prefix, matched at the front of what is left. The named groups `rank` and `grank` are a
# global rank (`[rank15]:`, `[15]:`); `label` is srun's task label, `local` torchrun's `[<role><local_rank>]:`.
_LAYER = re.compile("|".join((
    r"(?:\x1b\[[0-9;]{0,20}m){1,4} ?",  # terminal colours (Ray colours its prefixes)
    r" {0,6}(?P<label>\d{1,6})(?:-\d{1,6})?: ",  # srun --label: `15: `, ` 3: ` (right-aligned)
    # pdsh (DeepSpeed's multi-node launcher, `pdsh -w`): the host's name or address, `worker-1: `,
    # `192.168.0.6: `. A name must end in a digit (`gpu-node-07`, `nid004069`), so a word (`error: `) is not one.
    r"(?:\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|[a-z][a-z0-9.-]{0,120}\d): ",
    r" {0,8}\[rank(?P<rank>\d{1,6})\]: ?",  # PyTorch's global rank
    r" {0,8}\[(?P<grank>\d{1,6})\]: ?",  # torchrun's log_line_prefix_template `[${rank}]:`
    r"\[\d{1,6},(?P<mpirank>\d{1,6})\]<(?:stdout|stderr|stddiag)>: ?",  # Open MPI's --tag-output `[1,12]<stderr>:`
    # torchrun --tee / --redirects, whose default prefix is `[${role_name}${local_rank}]:` (`[default3]:`)
    r" {0,8}\[[A-Za-z_][A-Za-z_-]{0,40}(?P<local>\d{1,6})\]: ?",
    r"\((?:[A-Za-z_][\w.:-]{0,80} )?pid=\d{1,10}(?:, ?[a-z_]{1,20}=[^,()\s]{1,80}){0,4}\) ?",  # Ray worker
    r"\((?:raylet|gcs_server|autoscaler|monitor|dashboard|log_monitor)(?:[ ,][^()\n]{0,60})?\) ?",  # Ray
    r"\[" + _ISO + r"\]:? ?",  # `[2026-12-04 10:00:00,123] `
    _ISO + r"(?: ?[|:-])? ",  # `2026-12-04T10:00:00.123Z `, `2026-12-04 10:00:00,123 - `
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? ",  # vLLM's `%m-%d %H:%M:%S` (`ERROR 03-05 00:25:45 [core.py:1094] `)
    r"(?P<glog>[IWEF])\d{4} \d\d:\d\d:\d\d\.\d{1,9} {1,4}\d{1,10} [\w./-]{1,120}:\d{1,6}\] ",  # glog
    r"\[(?P<c10>[IWEF])(?:\d{4} [\d:.]{8,20}(?: {1,4}\d{1,10})?)? ?[\w./-]{1,120}:\d{1,6}\]:? ?",  # c10's glog
    r"(?P<lvl1>" + _LEVEL + r"):[\w.<>-]{0,120}:",  # Python's logging.basicConfig: `INFO:root:`
    r"\[(?P<lvl2>" + _LEVEL + r")\]:? ?",  # `[INFO] `
    r"\|? ?(?P<lvl3>" + _LEVEL + r") {0,8}(?:[|:-] ?| )",  # `ERROR - `, `| ERROR    | `, `INFO `
    r"\[[\w.-]{1,80}\.py:\d{1,6}(?::[\w<>.]{1,80})?\] ?",  # `[logging.py:96:log_dist] ` (DeepSpeed)
    r"[\w.<>-]{1,100}+:[\w<>.]{1,100}+:\d{1,6} - ",  # loguru's `module:function:12 - `
    r"[\w.-]{1,64}+ {1,30}\| ",  # docker compose: `trainer-1  | `
    # JAX's traceback filtering re-raises the program's exception behind a wrapper class of its own, on the
    # same line: `jax._src.traceback_util.UnfilteredStackTrace: jax._src.errors.ConcretizationTypeError: ...`
    r"(?:[a-z_][\w.]{0,60}\.)?(?:Unfiltered|Filtered)StackTrace: ",
    r"[-|] ",  # what is left of a separator between the parts above
)))
_QUIET = frozenset({"DEBUG", "INFO", "NOTICE", "WARNING", "WARN", "TRACE", "I", "W"})
"""Levels of a record that is not an error: a signature is not looked for behind them (a warning that
names an exception, `WARNING:root:FileNotFoundError: ...`, is a handled one, not a crash), while the
progress parsers still read through them (`INFO - step 100 ...`: strip)."""


def _quiet(layer: re.Match) -> bool:
    level = layer["lvl1"] or layer["lvl2"] or layer["lvl3"] or layer["glog"] or layer["c10"]
    return level is not None and level in _QUIET


_JOINED = re.compile(r"\[[A-Za-z_][A-Za-z_-]{0,40}\d{1,6}\]:|\((?:[A-Za-z_][\w.:-]{0,80} )?pid=\d{1,10}[,)]")
"""Where a second record may start in the middle of a line: a torchrun or Ray worker prefix (a
logger's record and a rank's traceback line written together, with no newline between them)."""


@dataclass(frozen=True, slots=True)
class View:
    offset: int
    """The record is line[offset:]."""
    ranks: tuple[int, ...] = ()
    """Global ranks that the prefixes taken off before `offset` name (torchrun's `[rankN]:`)."""


_WHOLE = (View(0),)


def views(line: str) -> tuple[View, ...]:
    """Where records begin in `line`: the line itself first, then the end of each known prefix, in
    order; then the same for each record joined behind a mid-line rank or Ray worker prefix."""
    head = line[:MAX_SCAN]
    found = _stack(head, 0, ())
    start = found[-1].offset if len(found) > 1 else 0
    joined = 0 if "]:" in head or "pid=" in head else MAX_JOINED  # (C-speed tests: most lines have neither)
    while joined < MAX_JOINED and (hit := _JOINED.search(head, start + 1)) is not None:
        found += _stack(head, hit.start(), ())
        start = hit.start()
        joined += 1
    if len(found) == 1:
        return _WHOLE
    return tuple({v.offset: v for v in found}.values())


def strip(line: str) -> tuple[int, int | None]:
    """Where the record of `line` begins once every known prefix at its front is taken off, and the
    rank those prefixes name (a global rank, else srun's task label, else torchrun's local rank), or
    None. What the progress parsers read (relaunch.common.progress.parsing)."""
    head = line[:MAX_SCAN]
    layer = _LAYER.match(head)
    if layer is None:
        return 0, None
    pos, rank, label, local = 0, None, None, None
    for _ in range(MAX_LAYERS):
        if layer is None or layer.end() == pos:
            break
        glob = layer["rank"] or layer["grank"] or layer["mpirank"]
        rank = rank if rank is not None or glob is None else int(glob)
        label = label if label is not None or layer["label"] is None else int(layer["label"])
        local = local if local is not None or layer["local"] is None else int(layer["local"])
        pos = layer.end()
        layer = _LAYER.match(head, pos)
    return pos, next((r for r in (rank, label, local) if r is not None), None)


def _stack(head: str, pos: int, ranks: tuple[int, ...]) -> tuple[View, ...]:
    out = [View(pos, ranks)]
    for _ in range(MAX_LAYERS):
        layer = _LAYER.match(head, pos)
        if layer is None or layer.end() == pos or _quiet(layer):
            break
        if (glob := layer["rank"] or layer["grank"] or layer["mpirank"]) is not None:
            ranks = (*ranks, int(glob))
        pos = layer.end()
        out.append(View(pos, ranks))
    return tuple(out)
