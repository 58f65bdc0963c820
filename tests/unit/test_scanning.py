"""The scanner: bounded time on hostile input, a prefilter that never changes a result, and block
scanning of streamed files that agrees with line-by-line scanning."""

import io
import random
import time
from pathlib import Path

from relaunch.common.diagnosis.blocks import iter_text_blocks
from relaunch.common.diagnosis.classifying import classify
from relaunch.common.diagnosis.scanning import literal_trie_pattern, scanner_for
from relaunch.common.diagnosis.signatures import MAX_LINE, builtin_catalogue

CATALOGUE = builtin_catalogue()
SCANNER = scanner_for(CATALOGUE)
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "logs"


def reference(line: str):
    """What the scanner must answer: the first signature whose whole pattern matches, no prefilter."""
    head = line[:MAX_LINE].removesuffix("\r")
    for sig in CATALOGUE.signatures:
        found = sig.pattern.search(head)
        if found:
            if sig.role == "advice":
                return None
            xid = found.groupdict().get("xid")
            return CATALOGUE.xid_classes.get(int(xid), sig).id if xid else sig.id
    return None


def sample_lines() -> list[str]:
    lines = [e for s in CATALOGUE.signatures for e in s.examples]
    for path in sorted(CORPUS.glob("*.log")) if CORPUS.is_dir() else []:
        lines += path.read_text(errors="replace").splitlines()
    rng = random.Random(7)
    mutated = []
    for line in lines:  # case changes and cuts must not fool the prefilter either
        mutated += [line.upper(), line.lower(), line[: rng.randrange(len(line) + 1)], "x" + line[::-1]]
    return lines + mutated + ["SIGSEGV", "ſegmentation fault", "KILLED", "loss=NaN", "Xid 79", ""]


def test_the_prefilter_never_changes_a_result():
    for line in sample_lines():
        found = SCANNER.match_line(line, 0)
        assert (found.signature.id if found else None) == reference(line), line


def test_block_scanning_agrees_with_line_scanning():
    lines = sample_lines()
    by_line = [(m.index, m.signature.id) for m in SCANNER.scan(lines)]
    text = "\n".join(lines)
    cut = text.index("\n", 5000) + 1  # blocks end at line ends
    blocks = [text[:cut], text[cut:]]
    assert [(m.index, m.signature.id) for m in SCANNER.scan_text(blocks)] == by_line
    assert len(by_line) > 50


GENERIC = ["a" * MAX_LINE, " " * MAX_LINE, "0" * MAX_LINE, "[" * MAX_LINE, ":" * MAX_LINE,
           "\x00\xff\ufffd" * (MAX_LINE // 3), "a " * (MAX_LINE // 2), "[a]: " * (MAX_LINE // 5)]


def repeated(text: str) -> str:
    return (text * (MAX_LINE // max(len(text), 1) + 1))[:MAX_LINE]


def test_no_pattern_backtracks_catastrophically():
    """Every alternative of every pattern on long hostile lines: its own literals and examples repeated
    to the full matched length (the inputs that drive a regex deepest), and generic junk. The thread's CPU
    time is measured, not the wall clock: a loaded machine deschedules the test, a backtracking regex
    burns CPU."""
    worst, slowest = 0.0, None
    for sig, piece, words in SCANNER._units:
        own = [repeated(v) for w in [*(words or ()), *sig.examples] for v in (w, w.upper(), w + " ")]
        for line in [*GENERIC, *own]:
            started = time.thread_time()
            piece.search(line)
            if (took := time.thread_time() - started) > worst:
                worst, slowest = took, (sig.id, line[:40])
    for locator in CATALOGUE.locators:
        for line in GENERIC:
            started = time.thread_time()
            locator.pattern.search(line)
            worst = max(worst, time.thread_time() - started)
    assert worst < 0.1, f"{slowest} took {worst:.3f} s"


def test_a_whole_scan_of_hostile_lines_is_bounded_per_line():
    lines = [repeated(e) for s in CATALOGUE.signatures for e in s.examples] + GENERIC
    started = time.perf_counter()
    for line in lines:
        SCANNER.match_line(line, 0)
    assert (time.perf_counter() - started) / len(lines) < 0.02


def test_ten_megabyte_lines_binary_junk_and_invalid_utf8_cost_bounded_time():
    tail = b"Segmentation fault\n"
    data = (b"x" * 10_000_000 + b" " + tail  # the error lies past the cut: not seen
            + bytes(b for b in range(256) if b not in b"\r\n") * 4000 + b"\n"  # binary junk
            + b"\xff\xfe\xc3\x28 RuntimeError: CUDA error: \xe2\x82 unspecified launch failure\n")
    started = time.perf_counter()
    found = classify(SCANNER.scan_text(iter_text_blocks(io.BytesIO(data))))
    assert time.perf_counter() - started < 2.0
    assert found.signature_id == "cuda_launch_failure" and found.evidence[0].index == 2


def test_streamed_blocks_cut_lines_split_carriage_returns_and_keep_the_last_line():
    data = b"one\r\ntwo\r" + b"y" * 50 + b"\n" + b"z" * 30 + b"\nlast without newline"
    blocks = list(iter_text_blocks(io.BytesIO(data), block_bytes=7, max_line_bytes=20))
    text = "".join(blocks)
    assert all(b.endswith("\n") for b in blocks[:-1])
    assert text.split("\n") == ["one", "", "two", "y" * 20, "z" * 20, "last without newline"]


def test_a_line_longer_than_a_block_is_cut_not_held():
    data = b"a" * 100 + b"KEEP\n" + b"b" * 10 + b"\n"
    blocks = list(iter_text_blocks(io.BytesIO(data), block_bytes=8, max_line_bytes=16))
    assert "".join(blocks) == "a" * 16 + "\n" + "b" * 10 + "\n"


def test_the_trie_pattern_matches_exactly_the_words_longest_first():
    import re
    pattern = re.compile(literal_trie_pattern(["error", "errors", "err:", "xid"]))
    assert [m.group() for m in pattern.finditer("errors err: xi xid erro")] == ["errors", "err:", "xid"]
