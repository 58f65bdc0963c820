"""A job's output is read only where the job's user could read it (issue 35, docs/security.md): the pure
permission rules, and the owner-checked opener on real files, directories and symlinks (run as root, as
the detector is, with the job's user `nobody`)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from relaunch.detector.adapters.logfiles import Access, open_as_owner, read_new_lines, unreadable_reason
from relaunch.detector.domain.file_access import Entry, Owner, Refused, SEARCH, READ, permits, within

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of other users need root to make")


def test_permits_follows_the_owner_group_other_classes():
    alice = Owner(1000, frozenset({1000, 50}))
    assert permits(Entry(stat.S_IFREG | 0o600, 1000, 1000), alice, READ)
    assert not permits(Entry(stat.S_IFREG | 0o600, 0, 0), alice, READ)
    assert permits(Entry(stat.S_IFREG | 0o640, 0, 50), alice, READ)  # through a secondary group
    assert permits(Entry(stat.S_IFREG | 0o604, 1000, 0), Owner(1000, frozenset()), READ) is not False
    # the owner class decides for the owner, even when 'other' would allow more
    assert not permits(Entry(stat.S_IFREG | 0o044, 1000, 0), alice, READ)
    assert permits(Entry(stat.S_IFDIR | 0o711, 0, 0), alice, SEARCH)
    assert not permits(Entry(stat.S_IFDIR | 0o700, 0, 0), alice, SEARCH)
    assert permits(Entry(stat.S_IFREG | 0o000, 5, 5), Owner(0, frozenset({0})), READ)  # root reads everything


def test_within_needs_a_whole_component():
    assert within("/scratch/logs/a.out", ("/scratch/logs",))
    assert not within("/scratch/logs-other/a.out", ("/scratch/logs",))
    assert not within("/etc/shadow", ())
    assert within("/etc/shadow", ("/",))


@pytest.fixture
def tree():
    """tmp_path/jobs (world-searchable) holding: nobody's log, a root-only secret, a symlink of nobody's
    to the secret, and a private root directory with a world-readable file in it. (Not under pytest's
    tmp_path: that is root's private directory, which nobody may not search.)"""
    tmp_path = Path(tempfile.mkdtemp(prefix="relaunch-access-"))
    os.chmod(tmp_path, 0o755)
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o755)
    os.chmod(jobs, 0o777)
    log = jobs / "train-1.out"
    log.write_text("step 1\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    secret = jobs / "secret.txt"
    secret.write_text("CANARY-secret\n")
    os.chmod(secret, 0o600)
    link = jobs / "link.out"
    link.symlink_to(secret)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    hidden = private / "open.txt"
    hidden.write_text("CANARY-hidden\n")
    os.chmod(hidden, 0o644)
    if os.geteuid() == 0:
        os.chown(log, NOBODY, NOBODY)
        os.lchown(link, NOBODY, NOBODY)
    yield tmp_path, jobs, log, secret, link, hidden
    shutil.rmtree(tmp_path)


def nobody(*roots: str) -> Access:
    return Access(NOBODY, NOBODY, tuple(roots))


@needs_root
def test_the_users_own_log_is_read(tree):
    root, jobs, log, *_ = tree
    chunk = read_new_lines(str(log), 0, nobody(str(jobs)))
    assert chunk is not None and chunk.lines[1].startswith("RuntimeError")


@needs_root
def test_a_file_the_user_cannot_read_is_refused_whatever_the_path(tree):
    root, jobs, log, secret, link, hidden = tree
    for path in (secret, link, hidden):
        with pytest.raises(Refused, match="not readable by the job's user|not searchable"):
            open_as_owner(str(path), nobody(str(root)))
    # the same files for root's own job are fine
    os.close(open_as_owner(str(link), Access(0, 0, (str(root),))))


@needs_root
def test_a_path_outside_the_roots_and_the_working_directory_is_refused(tree):
    root, jobs, log, *_ = tree
    with pytest.raises(Refused, match="outside the allowed log roots"):
        open_as_owner("/etc/passwd", nobody(str(jobs)))
    with pytest.raises(Refused, match="outside"):
        open_as_owner(str(log), nobody("/nonexistent"))
    info = {"uid": str(NOBODY), "gid": str(NOBODY), "workdir": str(jobs)}
    os.close(open_as_owner(str(log), Access.of(info, ())))  # the job's working directory counts


@needs_root
def test_a_fifo_or_a_device_is_never_opened(tree):
    root, jobs, *_ = tree
    fifo = jobs / "pipe.out"
    os.mkfifo(fifo)
    os.chown(fifo, NOBODY, NOBODY)
    with pytest.raises(Refused, match="not a regular file"):
        open_as_owner(str(fifo), nobody(str(jobs)))
    with pytest.raises(Refused, match="not a regular file|outside"):
        open_as_owner("/dev/zero", nobody("/dev"))


def test_an_unknown_owner_reads_nothing(tmp_path):
    f = tmp_path / "x.out"
    f.write_text("hello\n")
    with pytest.raises(Refused, match="owner is not known"):
        open_as_owner(str(f), Access(None, None, (str(tmp_path),)))
    reason = unreadable_reason([str(f)], Access(None, None, (str(tmp_path),)))
    assert reason and "owner is not known" in reason


@needs_root
def test_the_fallback_says_why_the_log_was_not_read(tree):
    root, jobs, log, secret, link, hidden = tree
    reason = unreadable_reason([str(link)], nobody(str(root)))
    assert reason is not None and "not readable by the job's user" in reason
    assert "CANARY" not in reason
    assert unreadable_reason([str(log)], nobody(str(root))) is None
