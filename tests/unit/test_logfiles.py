import os

from relaunch.detector.adapters.logfiles import MAX_LINE_BYTES, Access, read_new_lines

ANY = Access(os.geteuid(), os.getegid(), ("/",))
"""This process's own user, anywhere (the owner checks: tests/unit/test_log_access.py)."""


def test_reads_complete_lines_and_keeps_the_partial_one(tmp_path):
    path = tmp_path / "job.out"
    path.write_bytes(b"one\ntwo\nthr")
    chunk = read_new_lines(str(path), 0, ANY)
    assert chunk.lines == ["one", "two"] and chunk.next_offset == 8 and chunk.ends == [4, 8]
    with open(path, "ab") as fh:
        fh.write(b"ee\n")
    chunk = read_new_lines(str(path), chunk.next_offset, ANY)
    assert chunk.lines == ["three"] and chunk.offset == 8


def test_missing_file_and_truncation(tmp_path):
    assert read_new_lines(str(tmp_path / "nope"), 0, ANY) is None
    path = tmp_path / "job.out"
    path.write_bytes(b"new\n")
    assert read_new_lines(str(path), 500, ANY).lines == ["new"]


def test_invalid_utf8_is_replaced_not_raised(tmp_path):
    path = tmp_path / "job.out"
    path.write_bytes(b"ok \xff\xfe bad\n\x00\x01binary\n")
    assert read_new_lines(str(path), 0, ANY).lines == ["ok \ufffd\ufffd bad", "\x00\x01binary"]


def test_ten_megabyte_line_costs_bounded_lines(tmp_path):
    path = tmp_path / "job.out"
    path.write_bytes(b"x" * 10_000_000 + b"\nnext\n")
    offset, lines = 0, []
    while True:
        chunk = read_new_lines(str(path), offset, ANY)
        if chunk.next_offset == offset:
            break
        lines += chunk.lines
        offset = chunk.next_offset
    assert offset == path.stat().st_size
    assert lines[-1] == "next" and all(len(line) <= MAX_LINE_BYTES for line in lines) and len(lines) < 20
