"""Slurm's job accounting (`sacct -P`), turned into attempts: pure parsing, Slurm 22.05 through 26.05.

Why sacct: slurmctld forgets a finished job MinJobAge seconds after it ends (then `squeue` and
`scontrol` say "Invalid job id"); the accounting database keeps one record per attempt for good.

Quirks worked around here (docs/slurm-versions.md):
- `sacct --json` reports wrong exit codes in 22.05.8, so we read `-P` text: `ExitCode` is "code:signal";
- the fields a release has differ (22.05 has no Restarts, StdOut or StdErr): the adapter asks
  `sacct --helpformat` once and requests those of ACCOUNTING_FIELDS the release prints;
- a job's name, comment, submit line, working directory and output patterns are text its user chose:
  they may hold `|`, newlines, control characters. The adapter separates fields with a delimiter
  made afresh for each call (nobody can put it in a job's text beforehand), and a record is known by
  its delimiters, not its lines: a newline in a user's text continues its record, it can neither end
  it nor start one for another job id (_records; tests/unit/test_slurm_user_text.py);
- times are the controller's local wall-clock without a zone (they are read as this host's local time);
- **a requeue gives the job a new SubmitTime** and a new record. Where sacct prints `Restarts`
  (24.11 and later) each record says which attempt it is. On older releases the requeued attempt's
  record ends (`End`) at the moment the next attempt is submitted, and that link tells the records
  of one job from those of an older job that had the same id (after the controller's state was
  wiped). 26.05 no longer moves `End` (a failed attempt keeps its failure time, however long the
  requeue waited), which is why Restarts is preferred wherever it exists;
- StdOut and StdErr are the submitted patterns (`%x-%j.out`), not paths: expand_pattern() makes paths.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from relaunch.common.job_states import FINAL_STATES

from .hostlists import expand

SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "ExitCode", "Submit", "End", "NodeList", "Partition", "Comment")
"""The fields every release since 22.05 prints, in the `|`-separated order older callers use."""
ACCOUNTING_FIELDS = ("JobIDRaw", "JobName", "State", "ExitCode", "Submit", "End", "NodeList", "Partition",
                     "Restarts", "StdOut", "StdErr", "WorkDir", "User", "UID", "GID", "SubmitLine", "Comment")
"""What relaunch asks for where the release has it; the first eight and Comment are required, Comment last."""
REQUIRED_FIELDS = frozenset(SACCT_FIELDS)
DELIMITER = "\x1f"
"""The delimiter of the captured fixtures (scripts/capture_slurm_fixtures.py); the adapter makes its own."""

REQUEUE_LINK = dt.timedelta(seconds=5)
"""A record whose End is this close to the next record's Submit was requeued into it (same job)."""
_ROUNDING = dt.timedelta(seconds=1)


@dataclass(frozen=True)
class AccountedAttempt:
    """One accounting record: one attempt of one job."""

    job_id: str
    name: str
    state: str
    exit_code: int | None
    submit: dt.datetime
    end: dt.datetime | None
    nodes: tuple[str, ...]
    partition: str
    comment: str
    restarts: int | None = None
    """The attempt's index, where sacct prints Restarts (24.11 and later)."""
    stdout: str = ""
    """Where the attempt's output went (expanded), or '' when sacct cannot say."""
    stderr: str = ""
    user_id: int | None = None
    """The job's owner (sacct's UID), primary group (GID) and working directory (WorkDir), where known."""
    group_id: int | None = None
    work_dir: str = ""
    user_name: str = ""
    """The user and group by name, where the record gives no ids (slurmdbd's, through slurmrestd)."""
    group_name: str = ""

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def parse_sacct_time(value: str) -> dt.datetime | None:
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return dt.datetime.fromisoformat(value).astimezone(dt.UTC)  # naive: this host's local time
    except ValueError:
        return None


def parse_exit_code(value: str) -> int | None:
    """"3:0" -> 3 (the code); "0:9" -> 137 (killed by signal 9, as a shell reports it)."""
    code, sep, signal = value.partition(":")
    if not sep:
        return None
    try:
        code_n, signal_n = int(code), int(signal)
    except ValueError:
        return None
    return 128 + signal_n if signal_n else code_n


def available_fields(helpformat: str) -> tuple[str, ...]:
    """The ACCOUNTING_FIELDS this release has, from `sacct --helpformat` (Comment last)."""
    have = set(helpformat.split())
    missing = sorted(REQUIRED_FIELDS - have)
    if missing:
        raise ValueError(f"this sacct lacks the fields {', '.join(missing)}")
    return tuple(f for f in ACCOUNTING_FIELDS if f in have)


def parse_sacct(text: str, fields: tuple[str, ...] = SACCT_FIELDS, delimiter: str = "|") -> list[AccountedAttempt]:
    """`sacct -X -D -P -n [--delimiter=D] --format=<fields>` -> records, in the order sacct printed them.

    A record that does not parse (too few fields, no submit time) is skipped: sacct prints nothing else
    on stdout with -n, and one odd record must not hide the others. A record is a line that starts
    with a job id and the delimiter, and the lines after it that do not (a newline in a user's text).
    """
    if fields[-1] != "Comment":
        raise ValueError("Comment must be the last sacct field")
    records = []
    n = len(fields)
    for line in _records(text, delimiter, n):
        parts = line.split(delimiter, n - 1)
        if len(parts) < n:
            continue
        row = dict(zip(fields, parts, strict=True))
        submitted = parse_sacct_time(row["Submit"])
        job_id = row["JobIDRaw"].strip()
        if submitted is None or not job_id:
            continue
        nodes = row["NodeList"]
        try:
            node_list = tuple(expand(nodes)) if nodes not in ("", "None assigned", "(null)") else ()
        except ValueError:
            node_list = ()
        restarts = row.get("Restarts", "").strip()
        stdout, stderr = output_paths(row, job_id, node_list)
        records.append(AccountedAttempt(
            job_id=job_id, name=row["JobName"], state=(row["State"].split() or [""])[0],  # "CANCELLED by 0"
            exit_code=parse_exit_code(row["ExitCode"]), submit=submitted, end=parse_sacct_time(row["End"]),
            nodes=node_list, partition=row["Partition"], comment=row["Comment"],
            restarts=int(restarts) if restarts.isdigit() else None, stdout=stdout, stderr=stderr,
            user_id=_count(row.get("UID", "")), group_id=_count(row.get("GID", "")), work_dir=row.get("WorkDir", ""),
        ))
    return records


def _records(text: str, delimiter: str, n: int) -> list[str]:
    """sacct's records: a line continues the record before it while that record still lacks some of
    its n-1 delimiters (a newline in a user's text: it cannot hold the delimiter), and when what it
    adds is not a record of its own (a newline in the comment, the last field)."""
    records: list[str] = []
    for line in text.removesuffix("\n").split("\n"):
        head, sep, _ = line.partition(delimiter)
        starts = bool(sep) and head.isascii() and head.isdigit()
        if records and (records[-1].count(delimiter) + line.count(delimiter) <= n - 1 or not starts):
            records[-1] += "\n" + line
        elif starts:
            records.append(line)
    return records


def _count(value: str) -> int | None:
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() else None


def output_paths(row: dict[str, str], job_id: str, nodes: tuple[str, ...]) -> tuple[str, str]:
    """(stdout, stderr) of a record: from StdOut/StdErr where the release prints them, else from the
    `-o`/`-e` options of SubmitLine; relative to WorkDir; Slurm's default `slurm-%j.out` when the
    submit line names none (an `#SBATCH -o` line inside the script is then not seen: the detector
    says so when the file is not there). '' where a pattern cannot be expanded."""
    workdir = row.get("WorkDir", "")
    if "StdOut" in row:
        out_pattern, err_pattern = row["StdOut"], row.get("StdErr", "")
    elif "SubmitLine" in row:
        out_pattern, err_pattern = submit_line_outputs(row["SubmitLine"])
    else:
        return "", ""
    values = {"j": job_id, "J": job_id, "A": job_id, "x": row.get("JobName", ""), "u": row.get("User", ""),
              "N": nodes[0] if nodes else "", "n": "0", "t": "0", "s": "batch"}
    stdout = expand_pattern(out_pattern or "slurm-%j.out", values, workdir)
    stderr = expand_pattern(err_pattern, values, workdir) if err_pattern else stdout
    return stdout, stderr


def submit_line_outputs(submit_line: str) -> tuple[str, str]:
    """The `--output` and `--error` patterns of an `sbatch ...` command line ('' where absent)."""
    import shlex

    try:
        words = shlex.split(submit_line)
    except ValueError:
        return "", ""
    found = {"o": "", "e": ""}
    long_names = {"--output": "o", "--error": "e"}
    takes_value = {"-A", "-b", "-c", "-C", "-D", "-d", "-F", "-G", "-i", "-J", "-L", "-M", "-m", "-N", "-n", "-p",
                   "-q", "-S", "-t", "-w", "-x"}
    i = 1
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            break  # the script; what follows are its own arguments
        name, eq, value = word.partition("=")
        if name in long_names:
            if not eq and i + 1 < len(words):
                i, value = i + 1, words[i + 1]
            found[long_names[name]] = value
        elif word[:2] in ("-o", "-e"):
            value = word[2:]
            if not value and i + 1 < len(words):
                i, value = i + 1, words[i + 1]
            found[word[1]] = value
        elif word in takes_value:
            i += 1
        i += 1
    return found["o"], found["e"]


def expand_pattern(pattern: str, values: dict[str, str], workdir: str) -> str:
    """Slurm's filename pattern (`%j`, `%x`, `%4j` zero-padded, `%%`, `\\` to keep it literal) as a
    path; '' when it uses a letter we cannot know (an array index, say)."""
    if pattern.startswith("\\"):
        expanded = pattern.replace("\\", "")
    else:
        out, i = [], 0
        while i < len(pattern):
            ch = pattern[i]
            if ch != "%":
                out.append(ch)
                i += 1
                continue
            j = i + 1
            while j < len(pattern) and pattern[j].isdigit():
                j += 1
            if j >= len(pattern):
                return ""
            letter, width = pattern[j], pattern[i + 1:j]
            if letter == "%":
                out.append("%")
            elif values.get(letter):
                value = values[letter]
                out.append(value.zfill(int(width)) if width and value.isdigit() else value)
            else:
                return ""
            i = j + 1
        expanded = "".join(out)
    if not expanded.startswith("/"):
        if not workdir:
            return ""
        expanded = workdir.rstrip("/") + "/" + expanded
    return expanded


def job_chain(records: list[AccountedAttempt], job_id: str, before: dt.datetime | None = None
              ) -> list[AccountedAttempt]:
    """The attempts of the newest job with this id (submitted at or before `before`), oldest first.

    Walking back from the newest record, an older record belongs to the same job when sacct's
    Restarts says it is the attempt just before (24.11 and later), or, where the release prints no
    Restarts, when it was requeued into the next one (its End within REQUEUE_LINK of the next
    Submit); the first record that is not ends an older job that happened to have the same id.
    """
    mine = sorted((r for r in records if r.job_id == job_id
                   and (before is None or r.submit <= before + _ROUNDING)),
                  key=lambda r: (r.submit, r.restarts or 0))
    if not mine:
        return []
    chain = [mine[-1]]
    for record in reversed(mine[:-1]):
        nxt = chain[-1]
        if nxt.restarts is not None and record.restarts is not None:
            if record.restarts != nxt.restarts - 1:
                break
        elif record.end is None or abs(nxt.submit - record.end) > REQUEUE_LINK:
            break
        chain.append(record)
    chain.reverse()
    return chain
