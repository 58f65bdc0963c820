"""Whether a job's user could read a file: pure, from the numbers stat() gives (docs/security.md).

relaunch runs with more privilege than the users whose jobs it watches, and a job's output path is
text the user chose (`sbatch -o`, a symlink in the user's own directory). The detector reads a job's
output only where the job's owner could have read it: every directory on the way searchable by the
owner and the file itself readable by the owner, judged by the classic mode bits (owner, group, other;
root reads everything), the file a regular file (a FIFO or a device would block or never end), and
the path inside the operator's allowed roots or the job's working directory.

Invariants:
- an unknown owner reads nothing (an observation that does not say whose job it is);
- POSIX ACLs are not consulted: a file that only an ACL opens to the user is refused, never the other
  way round (refusing costs an explanation, reading what should not be read costs a leak);
- the decision is taken on the inode actually opened (adapters/logfiles.py walks the path with
  O_NOFOLLOW from '/', so a component swapped for a symlink after the check fails the open).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass

READ, SEARCH = 4, 1
"""The permission bits asked for, in the 'other' position (r = 4, x = 1)."""


@dataclass(frozen=True)
class Owner:
    """Whose job it is: the uid and every group id the user has (primary first)."""

    uid: int
    gids: frozenset[int]


@dataclass(frozen=True)
class Entry:
    """What fstat() said of one path component."""

    mode: int
    uid: int
    gid: int


class Refused(Exception):
    """The job's user could not read this path, or it lies outside the allowed roots: why, in words an
    operator can act on (audited, and quoted by the Advice of a failure nothing else explains)."""


def permits(entry: Entry, owner: Owner, want: int) -> bool:
    """Whether `owner` has the `want` bits (READ or SEARCH) on `entry`, as the kernel decides without ACLs:
    the owner class if the user owns it, else the group class if one of the user's groups does, else other."""
    if owner.uid == 0:
        return want != SEARCH or bool(entry.mode & 0o111) or stat.S_ISDIR(entry.mode)
    if entry.uid == owner.uid:
        bits = (entry.mode >> 6) & 7
    elif entry.gid in owner.gids:
        bits = (entry.mode >> 3) & 7
    else:
        bits = entry.mode & 7
    return bits & want == want


def within(path: str, roots: tuple[str, ...]) -> bool:
    """Whether the resolved `path` lies under one of the resolved `roots` (a root itself is a directory)."""
    return any(root == "/" or path.startswith(root.rstrip("/") + "/") for root in roots if root)


def check_directory(entry: Entry, owner: Owner, name: str) -> None:
    if not stat.S_ISDIR(entry.mode):
        raise Refused(f"{name} is not a directory")
    if not permits(entry, owner, SEARCH):
        raise Refused(f"output path not readable by the job's user (uid {owner.uid}): "
                      f"directory {name} is not searchable by that user")


def check_file(entry: Entry, owner: Owner, name: str) -> None:
    if not stat.S_ISREG(entry.mode):
        raise Refused(f"{name} is not a regular file (relaunch reads a job's output from files only)")
    if not permits(entry, owner, READ):
        raise Refused(f"output path not readable by the job's user (uid {owner.uid}): {name} "
                      f"(owner uid {entry.uid}, mode {stat.S_IMODE(entry.mode):04o})")
