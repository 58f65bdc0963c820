"""The scan engines: Hyperscan picks lines, Python decides them, and the results are the same as with
the pure-Python scanner, on the corpus, on generated training logs and on hostile input."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import random
import re
import sys
import time
from pathlib import Path

import pytest

from relaunch.common.diagnosis import scan_engines
from relaunch.common.diagnosis.blocks import MAX_LINE_BYTES, iter_byte_blocks, iter_text_blocks
from relaunch.common.diagnosis.byte_patterns import FOLDS_TO_ASCII, superset_source
from relaunch.common.diagnosis.signatures import MAX_LINE, builtin_catalogue, parse_catalogue
from relaunch.common.diagnosis.offline import classify_stream, load_scanner

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("RELAUNCH_CORPUS", REPO / "tests" / "corpus")) / "logs"
CORPUS_LOGS = sorted(CORPUS.glob("*.log")) if CORPUS.is_dir() else []
sys.path.insert(0, str(REPO / "bench"))
import make_log  # noqa: E402 - the bench's own generator of realistic training logs

ENGINES = ["python", pytest.param("hyperscan", marks=pytest.mark.skipif(
    not scan_engines.hyperscan_importable(), reason="hyperscan is not installed"))]


@pytest.fixture(params=ENGINES)
def scanner(request):
    found = load_scanner(engine=request.param)
    assert found.engine == request.param
    return found


def hyperscan_scanner():
    if not scan_engines.hyperscan_importable():
        pytest.skip("hyperscan is not installed")
    return load_scanner(engine="hyperscan")


def matches(scanner, data: bytes, block_bytes: int, threads: int = 1) -> list[tuple]:
    found = scanner.scan_bytes(iter_byte_blocks(io.BytesIO(data), block_bytes), MAX_LINE_BYTES)
    return [(m.index, m.signature.id, m.text, m.nodes, m.ranks, m.gpu, m.event) for m in found]


def reference(data: bytes) -> list[tuple]:
    """The pure-Python text path that predates the engines: decoded blocks, keyword trie."""
    scanner = load_scanner(engine="python")
    found = scanner.scan_text(iter_text_blocks(io.BytesIO(data)))
    return [(m.index, m.signature.id, m.text, m.nodes, m.ranks, m.gpu, m.event) for m in found]


def hostile_lines() -> list[bytes]:
    """Examples and corpus lines, then the same with what tells bytes from text: letters that fold to
    ASCII only under re.IGNORECASE, non-ASCII letters, digits and spaces, invalid UTF-8, cuts."""
    catalogue = builtin_catalogue()
    lines = [e for s in catalogue.signatures for e in s.examples]
    for path in CORPUS_LOGS:
        lines += path.read_text(errors="replace").splitlines()
    rng = random.Random(11)
    odd = ["\u0130", "\u0131", "\u017f", "\u212a", "\u00e9", "\u2588", "\u00a0", "\u2003", "\u0663", "\x1c",
           "\ufffd", "\U0001f600"]
    out = [line.encode() for line in lines]
    for line in lines:
        chars = list(line)
        for _ in range(3):
            mutated = chars[:]
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(mutated) + 1)
                mutated[i:i] = rng.choice(odd)
            out.append("".join(mutated).encode())
        folded = line.replace("s", "\u017f").replace("k", "\u212a").replace("i", "\u0131").replace("I", "\u0130")
        out += [folded.encode(), line.upper().encode(), line.encode()[: rng.randrange(len(line) + 1)],
                line.encode().replace(b" ", b"\xff", 1), b"\xc3" + line.encode(), line.replace(" ", "\u00a0").encode()]
    return out


def test_both_engines_classify_the_corpus_exactly_alike():
    engines = [load_scanner(engine=e) for e in ("python", "hyperscan") if e == "python" or
               scan_engines.hyperscan_importable()]
    if not CORPUS_LOGS:
        pytest.skip(f"no corpus at {CORPUS} (set RELAUNCH_CORPUS to the folder holding labels.jsonl and logs/)")
    for path in CORPUS_LOGS:
        data = path.read_bytes()
        results = [classify_stream(io.BytesIO(data), s) for s in engines]
        assert all(r == results[0] for r in results), path.name
        assert matches(engines[-1], data, 1 << 20) == reference(data), path.name


def test_the_engine_finds_every_line_python_matches_whatever_its_bytes():
    """The superset invariant, checked line by line on the hostile sample: every line on which some
    explaining pattern matches is among the lines the engine picks."""
    scanner = hyperscan_scanner()
    lines = hostile_lines()
    block = b"\n".join(line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines) + b"\n"
    picked = {block.count(b"\n", 0, start) for start, _ in scanner.line_finder(block)}
    patterns = scanner.explaining_patterns()
    for number, line in enumerate(block.split(b"\n")[:-1]):
        text = line[:MAX_LINE_BYTES].decode("utf-8", "replace")[:MAX_LINE]
        hit = next((p.pattern for p in patterns if p.search(text)), None)
        assert hit is None or number in picked, (line[:160], hit)
    assert len(picked) > 100


@pytest.mark.parametrize("block_bytes", [4096, 1 << 16, 8 << 20])
def test_both_engines_agree_on_generated_training_logs_with_hostile_lines(tmp_path, block_bytes):
    path = tmp_path / "train.log"
    make_log.write(path, 1, seed=3)
    rng = random.Random(5)
    body = path.read_bytes().split(b"\n")
    for line in hostile_lines()[::7]:
        body.insert(rng.randrange(len(body)), line)
    body.insert(len(body) // 2, b"y" * 70_000 + b" Segmentation fault")  # past the cut: not seen
    body.insert(len(body) // 3, b"tqdm 50%\r[rank3]: RuntimeError: CUDA error: an illegal memory access\r")
    data = b"\n".join(body)
    expected = reference(data)
    assert len(expected) > 100
    assert matches(load_scanner(engine="python"), data, block_bytes) == expected
    if scan_engines.hyperscan_importable():
        assert matches(load_scanner(engine="hyperscan"), data, block_bytes) == expected


def test_threads_change_nothing(tmp_path):
    scanner = hyperscan_scanner()
    path = tmp_path / "train.log"
    make_log.write(path, 20, seed=9)
    with open(path, "rb") as one, open(path, "rb") as many:
        assert classify_stream(one, scanner, threads=1) == classify_stream(many, scanner, threads=4)


def _without_indexes(found):
    return None if found is None else dataclasses.replace(
        found, evidence=tuple(dataclasses.replace(e, index=0) for e in found.evidence))


@pytest.mark.parametrize("threads", [1, 3])
def test_without_line_numbers_the_verdict_and_its_evidence_are_the_same(tmp_path, threads, monkeypatch):
    """`relaunch classify --json` skips counting lines: the evidence's index is then a position, and
    nothing else may change, nor the order of the evidence (hostile lines, a block the engine leaves to
    Python, the corpus)."""
    scanner = hyperscan_scanner()
    from relaunch.common.diagnosis import hyperscan_engine

    monkeypatch.setattr(hyperscan_engine, "MAX_ENDS", 200)
    path = tmp_path / "train.log"
    make_log.write(path, 3, seed=4)
    body = path.read_bytes().split(b"\n")
    rng = random.Random(8)
    for line in hostile_lines()[::5]:
        body.insert(rng.randrange(len(body)), line)
    body.insert(len(body) // 2, b"xdbe" * 2_000)  # more engine hits than MAX_ENDS: matched in Python
    datas = [b"\n".join(body)] + [p.read_bytes() for p in CORPUS_LOGS]
    compared = 0
    for data in datas:
        numbered = classify_stream(io.BytesIO(data), scanner, threads=threads)
        positioned = classify_stream(io.BytesIO(data), scanner, threads=threads, line_numbers=False)
        assert _without_indexes(positioned) == _without_indexes(numbered)
        if numbered is not None:
            compared += 1
            assert [e.text for e in positioned.evidence] == [e.text for e in numbered.evidence]
            assert [e.index for e in positioned.evidence] == sorted(e.index for e in positioned.evidence)
    assert compared >= 1


def test_positions_grow_with_the_lines_across_blocks_and_the_python_fallback(monkeypatch):
    scanner = hyperscan_scanner()
    from relaunch.common.diagnosis import hyperscan_engine

    monkeypatch.setattr(hyperscan_engine, "MAX_ENDS", 200)
    lines = [b"ok line %d" % i for i in range(4000)]
    for i in range(0, 4000, 97):
        lines[i] = b"Segmentation fault (core dumped) at %d" % i
    lines[2000] = b"xdbe" * 2_000  # this block's engine hits run over MAX_ENDS
    data = b"\n".join(lines) + b"\n"
    blocks = [scanner.prepare_block(b, count_lines=False) for b in iter_byte_blocks(io.BytesIO(data), 16384)]
    assert any(b.spans is None for b in blocks) and any(b.spans is not None for b in blocks)
    found = list(scanner.scan_prepared(blocks, MAX_LINE_BYTES, line_numbers=False))
    numbered = matches(scanner, data, 16384)
    assert [m.text for m in found] == [t for _, _, t, *_ in numbered]
    assert [m.index for m in found] == sorted(set(m.index for m in found))


def test_the_planted_failures_of_the_bench_log_are_found(tmp_path, scanner):
    path = tmp_path / "train.log"
    make_log.write(path, 2)
    with open(path, "rb") as stream:
        found = classify_stream(stream, scanner)
    assert (found.signature_id, found.action, found.ranks) == ("gpu_ecc_uncorrectable", "restart_excluding", (12,))


def test_ten_megabyte_lines_binary_junk_and_invalid_utf8_cost_bounded_time(scanner):
    tail = b"Segmentation fault\n"
    data = (b"x" * 10_000_000 + b" " + tail  # the error lies past the cut: not seen
            + bytes(b for b in range(256) if b not in b"\r\n") * 4000 + b"\n"  # binary junk
            + b"xdbe" * 3_000_000 + b"\n"  # the engine's superset of \bDBE\b matches all along 12 MB
            + b"\xff\xfe\xc3\x28 RuntimeError: CUDA error: \xe2\x82 unspecified launch failure\n")
    started = time.perf_counter()
    found = classify_stream(io.BytesIO(data), scanner)
    assert time.perf_counter() - started < 2.0
    assert found.signature_id == "cuda_launch_failure" and found.evidence[0].index == 3


def test_every_superset_matches_where_its_pattern_does_checked_without_hyperscan():
    """The same invariant with Python's own bytes regex standing in for Hyperscan (same syntax and,
    for what the supersets use, same meaning), unit by unit: it runs where hyperscan is absent."""
    scanner = load_scanner(engine="python")
    supersets = {}
    for line in hostile_lines():
        line = line.replace(b"\n", b" ").replace(b"\r", b" ")
        head = line[:MAX_LINE_BYTES].decode("utf-8", "replace")[:MAX_LINE]
        for sig, piece in scanner._plan(scanner._keywords_in(head)):
            if sig.role == "advice" or not piece.search(head):
                continue
            if piece not in supersets:
                supersets[piece] = re.compile(superset_source(piece), re.MULTILINE)
            # Lines with a letter that folds to ASCII are picked by a source of their own.
            folds = any(ch in head for ch in FOLDS_TO_ASCII)
            assert folds or supersets[piece].search(line), (sig.id, piece.pattern[:80], line[:160])
    # Most piece patterns are exercised: by the corpus when it is there, by the examples always.
    assert len(supersets) > (150 if CORPUS_LOGS else 100)


@pytest.mark.parametrize("pattern, line", [
    (r"a.{0,5}b", "a\u2588\u2588\u2588\u2588\u2588b".encode()),  # 5 characters, 15 bytes
    (r"a[^x]{2}b", "a\U0001f600\u00e9b".encode()),
    (r"id=\w{1,3};", "id=\u00e9\u00e8\u00ea;".encode()),
    (r"x\s{1,2}y", "x\u2003\u00a0y".encode()),
    (r"x\s+y", b"x\x1c\x1fy"),  # Python's \s holds the ASCII separators
    (r"n=\d+", "n=\u0663\u0664".encode()),  # Arabic-Indic digits are digits to Python
    (r"caf\u00e9\b-x", "caf\u00e9-x".encode()),  # a boundary for Python, none between bytes >= 0x80 and "-"
    (r"(?i)stra\u00dfe", "STRA\u00dfE".encode()),
    (r"caf\u00e9", "caf\u00e9".encode()),
    (r"a\ufffdb", b"a\xffb"),  # invalid bytes decode to U+FFFD
    (r"a.b", b"a\xe2\x82b"),  # a truncated sequence is one character
    (r"(?P<x>ab)c(?P=x)", b"abcab"),
    (r"foo(?=bar)", b"foobar"),
    (r"(?<!x)foo$", b"foo"),
    (r"^\[rank\d+\]: err", b"[rank3]: err"),
    (r"(?i:ERROR) code (?:1|2){1,2}", b"error code 12"),
    (r"(?>ab|a)c", b"abc"),
    (r"a{2,}+b", b"aaab"),
    (r"x(a|b)?y", b"xy"),
])
def test_a_superset_matches_the_bytes_of_what_its_pattern_matches(pattern, line, tmp_path):
    compiled = re.compile(pattern)
    assert compiled.search(line.decode("utf-8", "replace")), "the case must match in Python"
    source = superset_source(compiled)
    assert re.compile(source, re.MULTILINE).search(line)
    if scan_engines.hyperscan_importable():
        from relaunch.common.diagnosis.hyperscan_engine import line_finder

        finder = line_finder(pattern, lambda: [source], tmp_path)
        assert finder(b"before\n" + line + b"\nafter") == [(7, 7 + len(line))]


def test_an_end_anchor_also_matches_where_a_long_line_is_cut():
    ops = parse_catalogue("[[signature]]\nid = 'cut'\npattern = 'boom$'\ncategory = 'c'\nfault_domain = 'unknown'\n"
                          "action = 'restart'\ncascade = false\nsummary = 's'\n", "ops.toml")
    data = b"x" * (MAX_LINE - 4) + b"boom and more\nboom\n"
    expected = [(0, "cut"), (1, "cut")]
    for engine in ("python", "hyperscan") if scan_engines.hyperscan_importable() else ("python",):
        scanner = scan_engines.scanner_with_engine(ops, engine)
        found = scanner.scan_bytes(iter_byte_blocks(io.BytesIO(data)), MAX_LINE_BYTES)
        assert [(m.index, m.signature.id) for m in found] == expected, engine


def test_a_pattern_that_needs_a_newline_matches_no_line():
    assert superset_source(re.compile(r"a\nb")) is None
    assert superset_source(re.compile(r"x|a\nb")) is not None


def test_a_pattern_of_assertions_only_leaves_the_scanner_on_python(caplog):
    ops = parse_catalogue("[[signature]]\nid = 'peek'\npattern = '(?=abc)'\ncategory = 'c'\nfault_domain = 'unknown'\n"
                          "action = 'restart'\ncascade = false\nsummary = 's'\n", "ops.toml")
    with caplog.at_level(logging.WARNING):
        scanner = scan_engines.scanner_with_engine(ops, "auto")
    assert scanner.engine == "python"
    assert not scan_engines.hyperscan_importable() or "nothing but assertions" in caplog.text
    found = scanner.scan_bytes(iter_byte_blocks(io.BytesIO(b"x\nxabcx\n")))
    assert [(m.index, m.signature.id) for m in found] == [(1, "peek")]


def test_only_these_letters_fold_to_ascii_under_ignorecase():
    letters = re.compile("(?i)[a-z]")
    assert {chr(c) for c in range(0x80, 0x110000) if letters.fullmatch(chr(c))} == set(FOLDS_TO_ASCII)


def test_without_hyperscan_the_python_engine_is_used_and_said_once(monkeypatch, caplog):
    catalogue = builtin_catalogue()
    monkeypatch.setitem(sys.modules, "relaunch.common.diagnosis.hyperscan_engine", None)
    scan_engines.scanner_with_engine.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger="relaunch.common.diagnosis.scan_engines"):
            assert scan_engines.scanner_with_engine(catalogue, "auto").engine == "python"
            assert scan_engines.scanner_with_engine(catalogue, "auto").engine == "python"
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        assert "hyperscan is not installed" in caplog.text
        with pytest.raises(scan_engines.EngineUnavailable):
            scan_engines.scanner_with_engine(catalogue, "hyperscan")
    finally:
        scan_engines.scanner_with_engine.cache_clear()


def test_a_catalogue_hyperscan_refuses_falls_back_to_python(monkeypatch, tmp_path, caplog):
    hyperscan_scanner()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(scan_engines, "superset_sources", lambda patterns: [b"fine", b"(unclosed"])
    monkeypatch.setattr(scan_engines, "translation_key", lambda patterns: "refused")
    scan_engines.scanner_with_engine.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            scanner = scan_engines.scanner_with_engine(builtin_catalogue(), "auto")
        assert scanner.engine == "python" and "(unclosed" in caplog.text
    finally:
        scan_engines.scanner_with_engine.cache_clear()


def test_the_compiled_database_is_cached_and_a_bad_cache_is_rebuilt(monkeypatch, tmp_path):
    hyperscan_scanner()
    from relaunch.common.diagnosis import hyperscan_engine

    compiled = []
    real = hyperscan_engine._compile
    monkeypatch.setattr(hyperscan_engine, "_compile", lambda sources: compiled.append(1) or real(sources))
    finder = hyperscan_engine.line_finder("k", lambda: [b"boom"], tmp_path)
    again = hyperscan_engine.line_finder("k", lambda: [b"boom"], tmp_path)
    assert len(compiled) == 1
    for cached in tmp_path.glob("*.db"):
        cached.write_bytes(b"not a database")
    rebuilt = hyperscan_engine.line_finder("k", lambda: [b"boom"], tmp_path)
    assert len(compiled) == 2
    for each in (finder, again, rebuilt):
        assert each(b"a\nx boom y\nb\n") == [(2, 10)]


def test_a_block_with_too_many_engine_hits_is_matched_in_python(monkeypatch):
    scanner = hyperscan_scanner()
    from relaunch.common.diagnosis import hyperscan_engine

    monkeypatch.setattr(hyperscan_engine, "MAX_ENDS", 3)
    data = b"".join(b"[rank%d]: RuntimeError: CUDA error: out of memory\n" % r for r in range(10))
    assert scanner.line_finder(data) is None
    assert matches(scanner, data, 1 << 20) == reference(data)


@pytest.mark.parametrize("block_bytes", [16, 64, 1000])
def test_reused_buffers_give_the_blocks_fresh_ones_do(block_bytes):
    """blocks.iter_reused_blocks (the offline reader) cuts a stream exactly as iter_byte_blocks does:
    carriage returns, over-long lines running past a read, a last line without its newline."""
    from relaunch.common.diagnosis.blocks import iter_reused_blocks
    import random
    rng = random.Random(7)
    pieces = [b"short\n", b"x" * 300 + b"\n", b"bar\rbaz\r\n", b"\n", b"y" * 40 + b"\n", b"z" * 90]
    data = b"".join(rng.choice(pieces) for _ in range(400)) + b"no newline at the end"
    expected = list(iter_byte_blocks(io.BytesIO(data), block_bytes, 50))
    got, held = [], []
    for buf, length in iter_reused_blocks(io.BytesIO(data), 4, block_bytes, 50):
        held.append((buf, length, bytes(memoryview(buf)[:length])))
        if len(held) > 2:  # ring - 2 blocks may be held unfinished: they must not have changed
            old_buf, old_length, old_copy = held.pop(0)
            assert bytes(memoryview(old_buf)[:old_length]) == old_copy
            got.append(old_copy)
    got += [copy for _, _, copy in held]
    assert got == expected
