"""Matching log lines against the catalogue: at most one signature per line, in bounded time. Pure.

Invariants:
- a line is matched on its first MAX_LINE characters only, and no pattern nests quantifiers
  (pattern_analysis), so a huge or binary line costs bounded time;
- a line gets the first signature, in catalogue order, whose pattern matches it (advice comes first
  in the built-in catalogue, so a framework's hint is never read as the error it talks about);
- the prefilter only saves work and never changes a result: it looks for the literals that every
  match of a signature must contain (derived from the patterns, never hand-written), and a line is
  tried only against the signatures whose literals it holds. A multi-pattern engine (Hyperscan)
  can replace the finder (`_keywords_in`, and the block search in `scan_text`) without touching
  the rest;
- advice consumes a line and yields nothing: the classifier never needs it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .pattern_analysis import required_literals, top_level_alternatives
from .signatures import MAX_LINE, Catalogue, Signature

_NODE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
"""What relaunch.common.schemas.Name accepts: a name that is not one cannot be excluded in Slurm."""
_ADDRESS = re.compile(r"^[0-9.:]+$")


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

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
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
        for sig, piece in self._plan(self._keywords_in(head) if self._finder else frozenset()):
            found = piece.search(head)
            if found is not None:
                return None if sig.role == "advice" else self._match(sig, found, head, index)
        return None

    def _match(self, sig: Signature, found: re.Match[str], head: str, index: int) -> Match:
        groups = {k: v for k, v in found.groupdict().items() if v}
        verdict = sig
        if groups.get("xid", "").isdigit():
            verdict = self.catalogue.xid_classes.get(int(groups["xid"]), sig)
        nodes = [groups["node"]] if "node" in groups else []
        ranks = [groups["rank"]] if "rank" in groups else []
        for locator in self.catalogue.locators:
            located = locator.pattern.search(head)
            if located is not None:
                extra = located.groupdict()
                nodes += [extra["node"]] if extra.get("node") else []
                ranks += [extra["rank"]] if extra.get("rank") else []
        pid = groups.get("pid", "")
        event = pid if pid and "unknown" not in pid.lower() else (head[:found.start()].strip() or f"line {index}")
        return Match(
            signature=verdict, index=index, text=head,
            nodes=tuple(dict.fromkeys(n for n in map(node_name, nodes) if n)),
            ranks=tuple(dict.fromkeys(int(r) for r in ranks if r.isdigit() and len(r) <= 7)),
            gpu=groups.get("gpu"), event=event,
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
            text, finder = self._searchable(block)
            if self._always or finder is not self._finder or finder is None:
                lines = block.split("\n")
                if block.endswith("\n"):
                    lines.pop()
                yield from self.scan(lines, index)
                index += len(lines)
                continue
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
            index += text.count("\n", counted) + (0 if block.endswith("\n") or not block else 1)


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
