"""Binding progress reports to their job: the keys a job's reporters printed in its own log. Pure.

Every training process of every user holds the same `cli` NATS credentials, so a report on
`relaunch.signal.progress.<c>.<job>` says nothing about who sent it: anyone could report NaN losses for
another user's job and have it cancelled, or steps that set its hang deadline. relaunch.client's reporter
makes a random key when it starts and prints it once in the job's output ("relaunch: progress key <key>");
each of its reports carries the key. The detector reads the job's log as the job's user could
(adapters/logfiles.py) and takes a report into account only when its key was printed in that job's log
(docs/security.md): a stranger can neither write into the victim's log nor read the key (the `cli` user may
not subscribe to signals).

Invariants:
- a key is 16 to 64 lowercase hex digits; a line holds at most one;
- keys are kept per job (every attempt's reporters print their own), at most MAX_KEYS a job;
- a report with no key, or with a key its job's log never printed, changes nothing and is counted.
"""

from __future__ import annotations

import re

MARK = "relaunch: progress key "
KEY = re.compile(r"relaunch: progress key ([0-9a-f]{16,64})(?![0-9a-f])")
MAX_KEYS = 4096
"""Keys kept for one job (a reporter per rank of a 4,096-rank job); more are not recorded."""


def keys_in(lines: list[str]) -> list[str]:
    """The keys printed in these log lines, in order (launcher prefixes before the mark are fine)."""
    found = []
    for line in lines:
        if MARK in line and (m := KEY.search(line)):
            found.append(m.group(1))
    return found


def key_line(key: str, job_id: str) -> str:
    """What relaunch.client prints (the detector's KEY reads it)."""
    return f"{MARK}{key} (job {job_id}; relaunch accepts this job's progress reports only with it)"
