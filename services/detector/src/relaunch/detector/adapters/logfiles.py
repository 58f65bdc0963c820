"""Reading a job's log files: new lines at a byte offset, bounded in size (the follower); the detector's
only file reader (whole logs read offline: relaunch.common.diagnosis.blocks).

A line ends at '\n' or '\r' (each redraw of a progress bar is a frame of its own). A line is cut at
MAX_LINE_BYTES; of an over-long line only the head of each read (1 MiB) is kept,
so one 10 MB line costs bounded memory and time and yields about ten pieces. Bytes are decoded as
UTF-8 with replacement (binary junk never raises). A trailing partial line is left for the next read.

Every file is opened for the job's user (open_as_owner): the detector runs with more privilege than the
users whose output it reads, and a path is text the user chose, so a file that user could not read, or
one outside the allowed roots, is refused (domain/file_access.py; docs/security.md).
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass

from relaunch.common.diagnosis.blocks import MAX_LINE_BYTES, MAX_READ

from ..domain.file_access import Entry, Owner, Refused, check_directory, check_file, within

GROUPS_TTL_S = 300.0
"""How long a user's group list, read from the system's user database, is kept."""
_groups: dict[tuple[int, int], tuple[float, frozenset[int]]] = {}
REAL_TTL_S = 30.0
"""How long a path's resolution (symlinks followed) is kept. Safe to keep: what is read is decided by the
checks on the inodes the walk opens, never by the resolution; a stale one only makes a walk fail."""
_real: dict[str, tuple[float, str]] = {}


def resolved(path: str) -> str:
    """os.path.realpath, kept REAL_TTL_S (a resolution costs an lstat() per component)."""
    now = time.monotonic()
    hit = _real.get(path)
    if hit is not None and now - hit[0] < REAL_TTL_S:
        return hit[1]
    if len(_real) > 50_000:
        _real.clear()
    real = os.path.realpath(path)
    _real[path] = (now, real)
    return real


@dataclass(frozen=True)
class Access:
    """Whose job the files belong to and where its output may lie. `uid` None: not known, nothing is read."""

    uid: int | None
    gid: int | None
    roots: tuple[str, ...]
    """The operator's allowed roots and the job's working directory (resolved here)."""

    @classmethod
    def of(cls, info: dict[str, str], roots: tuple[str, ...]) -> Access:
        """From the job's hash in the hot state (fields uid, gid, workdir: detector handlers)."""
        uid, gid = info.get("uid", ""), info.get("gid", "")
        workdir = info.get("workdir", "")
        return cls(int(uid) if uid.isdigit() else None, int(gid) if gid.isdigit() else None,
                   (*roots, workdir) if workdir.startswith("/") else tuple(roots))


def owner_of(uid: int, gid: int | None) -> Owner:
    """The user's groups from the system's user database (the primary one alone where it does not know
    the user), kept GROUPS_TTL_S."""
    key, now = (uid, -1 if gid is None else gid), time.monotonic()
    cached = _groups.get(key)
    if cached is None or now - cached[0] > GROUPS_TTL_S:
        gids = {gid} if gid is not None else set()
        try:
            entry = pwd.getpwuid(uid)
            gids |= set(os.getgrouplist(entry.pw_name, entry.pw_gid if gid is None else gid))
        except (KeyError, OSError):
            pass
        if len(_groups) > 10_000:
            _groups.clear()
        cached = _groups[key] = (now, frozenset(gids))
    return Owner(uid, cached[1])


def _entry(fd: int) -> Entry:
    st = os.fstat(fd)
    return Entry(st.st_mode, st.st_uid, st.st_gid)


def open_as_owner(path: str, access: Access) -> int:
    """A read-only descriptor of `path` when the job's user could read it and it lies within the allowed
    roots; Refused (why) otherwise; FileNotFoundError when it does not exist (yet).

    The path is resolved once (symlinks followed: a link to a file the user may read is that file), then
    walked again from '/' one component at a time with O_NOFOLLOW, each directory checked on the inode
    opened: a component swapped for a symlink after the resolution fails the walk instead of leading
    elsewhere."""
    if access.uid is None:
        raise Refused("the job's owner is not known (the actuator's observation did not say), so its output "
                      "is not read")
    if not path.startswith("/"):
        raise Refused(f"{path!r} is not an absolute path")
    real = resolved(path)
    roots = tuple(resolved(r) for r in access.roots if r.startswith("/"))
    if not within(real, roots):
        raise Refused(f"{path} lies outside the allowed log roots ({', '.join(roots) or 'none'}; "
                      "RELAUNCH_DETECTOR_LOG_ROOTS and the job's working directory)")
    owner = owner_of(access.uid, access.gid)
    parts = [p for p in real.split("/") if p]
    if not parts:
        raise Refused("/ is not a file")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        where = ""
        for part in parts[:-1]:
            check_directory(_entry(fd), owner, where or "/")
            where += "/" + part
            try:
                nfd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError as exc:  # a symlink or a file where the resolution found a directory
                raise Refused(f"{where} changed while it was opened ({exc.strerror or exc})") from exc
            os.close(fd)
            fd = nfd
        check_directory(_entry(fd), owner, where or "/")
        try:
            ffd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise Refused(f"{real}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    try:
        check_file(_entry(ffd), owner, real)
    except Refused:
        os.close(ffd)
        raise
    return ffd


@dataclass(frozen=True)
class Chunk:
    offset: int
    """Byte offset of the first line."""
    lines: list[str]
    ends: list[int]
    """Byte offset just past each line (exact, whatever decoding or cutting did to the text)."""
    next_offset: int
    more: bool = False
    """The read stopped at its size limit: there may be more to read now."""
    mtime: float | None = None
    """The file's modification time (epoch seconds) when it was read: every byte read was written by then
    (only what that fstat saw is read); None for an empty read."""


def unreadable_reason(paths: list[str], access: Access) -> str | None:
    """None when at least one of a job's log files can be read here for the job's user; else why none
    can, in words an operator can act on (the Advice of a failure that nothing explains quotes it)."""
    if not paths:
        return "Slurm did not say where the job's output went"
    problems = []
    for path in paths:
        try:
            os.close(open_as_owner(path, access))
            return None
        except FileNotFoundError:
            problems.append(f"{path} does not exist on the detector's host")
        except Refused as exc:
            problems.append(str(exc))
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
    return "; ".join(problems)


def readable_size(path: str, access: Access) -> int | None:
    """The file's size where the job's user could read it; None where it is missing or refused (nothing of
    it is read then)."""
    try:
        fd = open_as_owner(path, access)
    except (OSError, Refused):
        return None
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def file_sizes(paths: list[str]) -> list[int | None]:
    """The size of each file, None where it does not exist (yet) or cannot be read: one thread hop
    for all the files the follower watches, instead of one per file."""
    sizes: list[int | None] = []
    for path in paths:
        try:
            sizes.append(os.stat(path).st_size)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            sizes.append(None)
    return sizes


def read_new_lines(path: str, offset: int, access: Access, max_read: int = MAX_READ) -> Chunk | None:
    """Lines completed since `offset`, or None when the file does not exist (yet); Refused when the job's
    user could not read it (open_as_owner)."""
    try:
        fd = open_as_owner(path, access)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd, "rb") as fh:
        stat = os.fstat(fd)
        size = stat.st_size
        if size < offset:  # truncated (a job without --open-mode=append was requeued): start over
            offset = 0
        if size == offset:
            return Chunk(offset, [], [], offset)
        fh.seek(offset)
        # No further than the fstat saw, so that its mtime bounds when every byte read was written.
        data = fh.read(min(max_read, size - offset))
    more = len(data) >= max_read
    lines: list[str] = []
    ends: list[int] = []
    consumed = 0
    # A carriage return ends a frame too: tqdm and Lightning redraw their bars with '\r' and no
    # newline, so without this a whole run's bar is one endless line, cut at MAX_LINE_BYTES, and a
    # line printed after it (Slurm's "CANCELLED ... DUE TO TIME LIMIT") would be lost in the cut
    # (the offline reader splits the same way: relaunch.common.diagnosis.blocks).
    has_cr = b"\r" in data
    while consumed < len(data):
        nl = data.find(b"\n", consumed)
        if has_cr:
            cr = data.find(b"\r", consumed, nl if nl != -1 else len(data))
            if cr != -1:
                nl = cr
        if nl == -1:
            if len(data) - consumed < MAX_LINE_BYTES:
                break  # a partial line: wait for the rest
            # An over-long line: keep its head, skip the rest of this read (one piece per read).
            nl = len(data) - 1
        raw = data[consumed: nl + 1].rstrip(b"\r\n")
        consumed = nl + 1
        if not raw and has_cr and (data[nl:nl + 1] == b"\r" or data[nl - 1:nl] == b"\r"):
            if ends:
                ends[-1] = offset + consumed  # the '\n' of '\r\n', or a '\r' with nothing before it
            continue
        lines.append(raw[:MAX_LINE_BYTES].decode("utf-8", "replace"))
        ends.append(offset + consumed)
    return Chunk(offset, lines, ends, offset + consumed, more, stat.st_mtime)


MAX_BACKDATE_S = 5.0
"""The follower's stamp of a batch goes back before its read by at most this much (written_by)."""


def written_by(read_at: float, mtime: float | None, looked_at: float | None) -> float:
    """When a chunk's lines were written at the latest (epoch seconds), for its LogBatch's read_at. Pure.

    A follower slowed down by a busy host reads a line seconds after it was written; the step it reports then
    looks seconds younger than it is, and a host cut just after that step looks as if it had died before it
    (docs/reliability.md, "Faults between hosts"). The file's mtime says when its last byte was written; a
    clock that the file's server and this host do not share must not make a line look older than it can be,
    so the mtime counts only between `looked_at` (this process's last look at the file before those lines
    were there: they were written after it) and the read, and only when that look is at most MAX_BACKDATE_S
    old. Without a recent look, or without an mtime: the read's own time, as before."""
    if mtime is None or looked_at is None or not 0 <= read_at - looked_at <= MAX_BACKDATE_S:
        return read_at
    return min(read_at, max(mtime, looked_at))
