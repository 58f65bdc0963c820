"""Matching log lines against the catalogue: at most one signature per line, in bounded time. Pure.

Invariants:
- a line is matched on its first MAX_LINE characters only, and no pattern nests quantifiers
  (pattern_analysis), so a huge or binary line costs bounded time;
- a line gets the first signature, in catalogue order, whose pattern matches it (advice comes first
  in the built-in catalogue, so a framework's hint is never read as the error it talks about); a
  pattern matches a line when it matches the line as printed or any of its records (prefixes.views:
  from the end of each launcher, logger or container prefix, and behind a mid-line rank prefix), so
  prefixes never hide an error, and the match keeps the raw line;
- the prefilter only saves work and never changes a result: it looks for the literals that every
  match of a signature must contain (derived from the patterns, never hand-written), and a line is
  tried only against the signatures whose literals it holds;
- a line finder (a multi-pattern engine over raw bytes, see byte_patterns and
  hyperscan_engine.py) may pick the lines of a block worth matching in `scan_bytes`; it is
  given byte supersets of the signatures, so it can only add lines, and every line it picks still
  gets the exact `match_line` above: the result is the same with or without it;
- advice consumes a line and yields nothing: the classifier never needs it.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .pattern_analysis import required_literals, top_level_alternatives
from .peers import pointed_at
from .prefixes import View, views
from .signatures import MAX_LINE, Catalogue, Signature

_NODE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
"""What relaunch.common.schemas.Name accepts: a name that is not one cannot be excluded in Slurm."""
_ADDRESS = re.compile(r"^[0-9.:]+$")
_WHOLE = View(0)

LineFinder = Callable[[bytes, int], "list[tuple[int, int]] | None"]
"""Given a block of whole lines (bytes, or a reused buffer) and how many of its bytes are the block, the
(start, end) spans of the lines that may match, in order, or None when it cannot say cheaply (the block
is then matched line by line in Python)."""


@dataclass(frozen=True)
class Match:
    signature: Signature
    """The verdict for the line: the signature that matched, or the XID class its code falls in."""
    index: int
    """Position of the line in what was scanned (0 = first line)."""
    text: str
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    gpu: str | None = None
    event: str | None = None
    """What makes this occurrence distinct when repeats are counted: the pid, else the line's time stamp."""
    addresses: tuple[str, ...] = ()
    """Addresses the line blames (a peer's, else the printing host's: peers.py); not node names."""


def node_name(raw: str) -> str | None:
    """A host name as Slurm knows it (short, no domain), or None when the text is not a usable name."""
    name = raw.strip().strip(".,:;'\"")
    if not name or _ADDRESS.match(name):
        return None  # an IP address names no Slurm node
    short = name.split(".", 1)[0]
    return short if _NODE.match(short) and not short.isdigit() else None


_CASE_EXCEPTIONS = re.compile("[\u0131\u017f]")
"""Letters that re.IGNORECASE equates with ASCII ones although str.lower() leaves them alone (dotless
i, long s): text holding them is searched with the case-insensitive prefilter instead."""


def literal_trie_pattern(words: Iterable[str]) -> str:
    """One regular expression matching any of `words`, shaped as a trie (`ab(?:c|d)`): Python's `re`
    tries alternatives one by one, so a flat alternation of hundreds of literals costs hundreds of
    comparisons per character, and the trie only a few. At a position it matches the longest word."""
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


class Scanner:
    """Built once from a catalogue; immutable afterwards (the plan cache only memoises)."""

    def __init__(self, catalogue: Catalogue, line_finder: LineFinder | None = None, engine: str = "python") -> None:
        self.catalogue = catalogue
        self.line_finder = line_finder
        self.engine = engine
        """Which finder picks the lines of a block: "python" (the keyword trie) or the engine's name."""
        # Units: each signature's top-level alternatives with their own keywords, in catalogue order,
        # so a line is tried only against the alternatives whose literals it holds.
        self._units = [(sig, piece, words) for sig in catalogue.signatures for piece, words in _pieces(sig)]
        explaining = [i for i, (sig, _, _) in enumerate(self._units) if sig.role != "advice"]
        # Advice only ever hides a line from the signatures after it, so it is tried only on lines
        # that some other signature might match, and needs no keywords of its own.
        self._advice = frozenset(i for i, (sig, _, _) in enumerate(self._units) if sig.role == "advice")
        self._always = frozenset(i for i in explaining if self._units[i][2] is None)
        owners: dict[str, set[int]] = {}
        for i in explaining:
            for keyword in self._units[i][2] or ():
                owners.setdefault(keyword.lower(), set()).add(i)
        # The finder reports the longest keyword at a position: the shorter keywords it contains are
        # there too, so they bring their units along.
        self._by_keyword = {k: frozenset().union(*(v for o, v in owners.items() if o in k)) for k in owners}
        source = literal_trie_pattern(owners) if owners else None
        self._finder = re.compile(source) if source else None  # searched in lower-cased text
        self._finder_any_case = re.compile(source, re.IGNORECASE) if source else None
        self._plan = functools.lru_cache(maxsize=4096)(self._plan_uncached)

    def __getstate__(self) -> dict:
        """What a pickled scanner keeps (scanner_cache): the derived units and finders, not the plan
        cache nor a line finder (an engine's handle; with_line_finder adds one)."""
        state = self.__dict__.copy()
        state.pop("_plan", None)
        state["line_finder"], state["engine"] = None, "python"
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._plan = functools.lru_cache(maxsize=4096)(self._plan_uncached)

    def with_line_finder(self, line_finder: LineFinder, engine: str) -> Scanner:
        """This scanner with a line finder: a shallow copy, since building the units costs ~0.2 s."""
        twin = copy.copy(self)
        twin.__dict__.update(line_finder=line_finder, engine=engine)
        return twin

    def explaining_patterns(self) -> list[re.Pattern[str]]:
        """The patterns a line finder must cover: every alternative that can explain a line. Advice is
        left out: it only ever hides a line that another signature matches."""
        return [piece for sig, piece, _ in self._units if sig.role != "advice"]

    def _searchable(self, text: str) -> tuple[str, re.Pattern[str] | None]:
        """Lower-cased text and the case-sensitive finder (fast) when positions survive lower-casing
        and no letter folds differently; else the text itself and the case-insensitive finder."""
        lowered = text.lower()
        if len(lowered) == len(text) and (text.isascii() or not _CASE_EXCEPTIONS.search(text)):
            return lowered, self._finder
        return text, self._finder_any_case

    def _keywords_in(self, head: str) -> frozenset[str]:
        text, finder = self._searchable(head)
        found, pos = set(), 0
        if finder is None:
            return frozenset()
        while (hit := finder.search(text, pos)) is not None:
            found.add(hit.group().lower())
            pos = hit.start() + 1  # keywords that overlap ("ncclerror", "error") must all be seen
        return frozenset(found)

    def _plan_uncached(self, keywords: frozenset[str]) -> tuple[tuple[Signature, re.Pattern[str]], ...]:
        everything = frozenset(range(len(self._units)))
        chosen = set(self._always)
        for keyword in keywords:
            chosen |= self._by_keyword.get(keyword, everything)  # unusual case folding: try them all
        if not chosen:
            return ()
        return tuple(self._units[i][:2] for i in sorted(chosen | self._advice))

    def match_line(self, line: str, index: int) -> Match | None:
        """The line's verdict, or None (no signature, or advice: a line that explains nothing)."""
        head = line[:MAX_LINE]
        if head.endswith("\r"):
            head = head[:-1]
        plan = self._plan(self._keywords_in(head) if self._finder else frozenset())
        if not plan:
            return None
        # A signature is tried on the line as printed, then from the end of each launcher, logger or
        # container prefix and on each record joined on the line (prefixes.py); the first signature in
        # catalogue order that matches one of them decides, and the evidence keeps the raw line.
        records = views(head)
        for sig, piece in plan:
            for record in records:
                found = piece.search(head[record.offset:] if record.offset else head)
                if found is not None:
                    return None if sig.role == "advice" else self._match(sig, found, head, index, record)
        return None

    def _match(self, sig: Signature, found: re.Match[str], head: str, index: int, record: View = _WHOLE) -> Match:
        groups = {k: v for k, v in found.groupdict().items() if v}
        verdict = sig
        if groups.get("xid", "").isdigit():
            verdict = self.catalogue.xid_classes.get(int(groups["xid"]), sig)
        nodes = [groups["node"]] if "node" in groups else []
        ranks = [groups["rank"]] if "rank" in groups else []
        ranks += map(str, record.ranks)
        for text in (head, head[record.offset:]) if record.offset else (head,):
            for locator in self.catalogue.locators:
                located = locator.pattern.search(text)
                if located is not None:
                    extra = located.groupdict()
                    nodes += [extra["node"]] if extra.get("node") else []
                    ranks += [extra["rank"]] if extra.get("rank") else []
        # A line that names the far end blames it, not the host that printed it (peers.py).
        pointed = pointed_at(head)
        if pointed.peer:
            nodes = list(pointed.names)
        pid = groups.get("pid", "")
        before = head[:record.offset + found.start()].strip()
        event = pid if pid and "unknown" not in pid.lower() else (before or f"line {index}")
        return Match(
            signature=verdict, index=index, text=head,
            nodes=tuple(dict.fromkeys(n for n in map(node_name, nodes) if n)),
            ranks=tuple(dict.fromkeys(int(r) for r in ranks if r.isdigit() and len(r) <= 7)),
            gpu=groups.get("gpu"), event=event, addresses=pointed.addresses,
        )

    def scan(self, lines: Iterable[str], first_index: int = 0) -> Iterator[Match]:
        """Every line a signature explains, in order."""
        for index, line in enumerate(lines, start=first_index):
            found = self.match_line(line, index)
            if found is not None:
                yield found

    def scan_text(self, blocks: Iterable[str]) -> Iterator[Match]:
        """Like `scan` over the lines of text given in blocks that end at line ends (the last may not).
        Only the lines the finder hits are cut out of a block, so healthy text costs one search."""
        index = 0
        for block in blocks:
            index = yield from self._scan_block(block, index)

    def _scan_block(self, block: str, index: int) -> Iterator[Match]:
        """The matches of one block whose first line has number `index`; returns the next block's."""
        text, finder = self._searchable(block)
        if self._always or finder is not self._finder or finder is None:
            lines = block.split("\n")
            if block.endswith("\n"):
                lines.pop()
            yield from self.scan(lines, index)
            return index + len(lines)
        pos = counted = 0
        while (hit := finder.search(text, pos)) is not None:
            start = text.rfind("\n", 0, hit.start()) + 1
            end = text.find("\n", hit.start())
            end = len(text) if end < 0 else end
            index += text.count("\n", counted, start)
            counted = start
            if hit.start() - start < MAX_LINE:  # else no keyword lies in the part of the line matched
                found = self.match_line(block[start:end], index)
                if found is not None:
                    yield found
            pos = end + 1
        return index + text.count("\n", counted) + (0 if block.endswith("\n") or not block else 1)

    def prepare_block(self, block: bytes | bytearray, length: int | None = None,
                      count_lines: bool = True) -> PreparedBlock:
        """The costly, independent part of scanning a block (the engine's search and the line count),
        separate so that a caller may run it for several blocks at once: it touches no shared state.
        The block is block[:length] (a reused buffer, blocks.iter_reused_blocks), all of it by default.
        count_lines=False leaves the lines uncounted (scan_prepared with line_numbers=False): counting
        holds the GIL and costs a third of a whole scan."""
        size = len(block) if length is None else length
        spans = self.line_finder(block, size) if self.line_finder is not None and size else None
        newlines = block.count(b"\n", 0, size) if spans is not None and count_lines else -1
        return PreparedBlock(block, newlines, spans, size)

    def scan_bytes(self, blocks: Iterable[bytes], max_line_bytes: int = MAX_LINE,
                   on_text: Callable[[str], object] | None = None) -> Iterator[Match]:
        """Like `scan_text` over raw blocks that end at line ends (blocks.iter_byte_blocks):
        each line is cut at `max_line_bytes` and decoded as UTF-8 with replacement, as the text reader
        does. With a line finder, only the lines it picks are cut out and decoded: a healthy block costs
        one engine search and no per-line Python work."""
        return self.scan_prepared(map(self.prepare_block, blocks), max_line_bytes, on_text=on_text)

    def scan_prepared(self, blocks: Iterable[PreparedBlock], max_line_bytes: int = MAX_LINE,
                      line_numbers: bool = True, on_text: Callable[[str], object] | None = None) -> Iterator[Match]:
        """`scan_bytes` over blocks already prepared (prepare_block), in order. line_numbers=False (the
        blocks prepared with count_lines=False): a Match's index is then a position that grows with the
        line's place in the stream (the block's byte offset plus the line's place in the block), not its
        line number, which is all a classification needs (classifying orders by it).
        `on_text` is shown every text that is matched: each line the line finder picked, or a whole block
        where it picked none (offline.py looks there for the lines progress.replay must see)."""
        if not line_numbers:
            yield from self._scan_positions(blocks, max_line_bytes, on_text)
            return
        index = 0
        for block in blocks:
            data, size = block.data, block.size
            if block.spans is None:
                index = yield from self._scan_block(_shown(_whole(block, max_line_bytes), on_text), index)
                continue
            base, counted = index, 0
            for start, end in block.spans:
                index += data.count(b"\n", counted, start)
                counted = start
                found = self.match_line(_shown(_line(data, start, end, max_line_bytes), on_text), index)
                if found is not None:
                    yield found
            index = base + block.newlines + (0 if size == 0 or data[size - 1] == 0x0A else 1)

    def _scan_positions(self, blocks: Iterable[PreparedBlock], max_line_bytes: int,
                        on_text: Callable[[str], object] | None) -> Iterator[Match]:
        offset = 0
        for block in blocks:
            data, size = block.data, block.size
            if block.spans is None:  # line indexes within the block: each is below the block's size
                yield from self._scan_block(_shown(_whole(block, max_line_bytes), on_text), offset)
            else:
                for start, end in block.spans:
                    found = self.match_line(_shown(_line(data, start, end, max_line_bytes), on_text), offset + start)
                    if found is not None:
                        yield found
            offset += size


def _shown(text: str, on_text: Callable[[str], object] | None) -> str:
    if on_text is not None:
        on_text(text)
    return text


def _line(data: bytes, start: int, end: int, max_line_bytes: int) -> str:
    """The line data[start:end], cut at max_line_bytes and decoded as the text reader does."""
    return data[start:min(end, start + max_line_bytes)].decode("utf-8", "replace")


def _whole(block: PreparedBlock, max_line_bytes: int) -> str:
    data, size = block.data, block.size
    return decoded_lines(data if size == len(data) else bytes(memoryview(data)[:size]), max_line_bytes)


@dataclass(frozen=True, slots=True)
class PreparedBlock:
    data: bytes
    """Whole lines (the last may lack its newline)."""
    newlines: int
    """How many newlines `data` holds (-1 when spans is None: not needed)."""
    spans: list[tuple[int, int]] | None
    """The lines worth matching, from the line finder; None: match every line in Python."""
    size: int = -1
    """The block is data[:size] (a reused buffer may be longer)."""

    def __post_init__(self) -> None:
        if self.size < 0:
            object.__setattr__(self, "size", len(self.data))


def decoded_lines(data: bytes, max_line_bytes: int) -> str:
    """Whole lines of bytes as text: each line cut at `max_line_bytes`, decoded as UTF-8 with replacement
    (binary junk never raises)."""
    parts = data.split(b"\n")
    if max(map(len, parts)) > max_line_bytes:
        data = b"\n".join(part[:max_line_bytes] for part in parts)
    return data.decode("utf-8", "replace")


def _pieces(sig: Signature) -> list[tuple[re.Pattern[str], frozenset[str] | None]]:
    """The signature's top-level alternatives, compiled with its flags, each with its keywords; the
    whole pattern when it cannot be split safely (verbose mode, a piece that does not compile alone)."""
    whole = [(sig.pattern, sig.keywords)]
    sources = top_level_alternatives(sig.pattern.pattern)
    if len(sources) == 1 or sig.pattern.flags & re.VERBOSE:
        return whole
    try:
        return [(re.compile(source, sig.pattern.flags), required_literals(source)) for source in sources]
    except re.error:
        return whole


@functools.lru_cache(maxsize=16)
def scanner_for(catalogue: Catalogue) -> Scanner:
    """One scanner per catalogue object (catalogues hash by identity)."""
    return Scanner(catalogue)
