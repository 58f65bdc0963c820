"""The checkpoint facts one batch of an attempt's progress holds (docs/goodput.md). Pure.

From log lines (the frameworks' save lines, relaunch.common.progress.phases) or relaunch.client reports
(`checkpoint_saved`): a save's start and end, with the step it holds (a line that names none: the highest
step the attempt had reached by then); the attempt's first step, where it resumed; and the first step at
which it got back past the step the attempt before it failed at (`catch_up`, which the detector keeps in
the job's hot state from the anomaly). Evaluation pauses are no saves.

Invariants: a fact's identity (`msg_id`) depends only on what it says, so that every rank's copy of a
line and every redelivery of a batch publish one message (JetStream's dedupe) and one ledger row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from relaunch.common.schemas import CheckpointFact

from relaunch.common.progress.loads import Load, loaded

from .progress import CheckpointMark, ProgressPoint, parse_line

CATCH_UP_FIELD = "catch_up"
"""The job's hot-state field: `<attempt>:<step>`, the step that attempt must pass to be back where the
one before it failed."""


def read_lines(lines: Iterable[str]) -> tuple[list, list[Load]]:
    """A log batch's progress marks (parse_line's) and, among its other lines, its checkpoint loads."""
    marks, loads = [], []
    for line in lines:
        if (mark := parse_line(line)) is not None:
            marks.append(mark)
        elif (load := loaded(line)) is not None:  # a checkpoint loaded: where the attempt resumed
            loads.append(load)
    return marks, loads


def catch_up_target(value: str | bytes | None, attempt: int) -> int | None:
    if not value:
        return None
    if isinstance(value, bytes):
        value = value.decode()
    index, _, step = value.partition(":")
    if not (index.isdigit() and step.isdigit()) or int(index) != attempt:
        return None
    return int(step)


def catch_up_value(attempt: int, step: int) -> str:
    return f"{attempt}:{step}"


def msg_id(fact: CheckpointFact) -> str:
    step = "" if fact.step is None else fact.step
    tail = f".{step}" if fact.kind in ("save_started", "saved", "loaded") else ""
    return f"checkpoint.{fact.cluster}.{fact.job_id}.{fact.attempt}.{fact.kind}{tail}"


def from_marks(cluster: str, job_id: str, attempt: int, marks: Iterable, at: dt.datetime, high_before: int | None,
               catch_up: int | None, source: str = "log", loads: Iterable[Load] = ()) -> list[CheckpointFact]:
    """The facts of one batch of parsed lines (`marks`, in order), read at `at`; `high_before`: the
    attempt's highest step before it (None: it has stepped no step yet); `loads`: the batch's checkpoint
    load lines (relaunch.common.progress.loads)."""
    out: list[CheckpointFact] = []
    high = high_before
    caught = False

    def fact(kind: str, step: int | None, preset: str = "") -> None:
        out.append(CheckpointFact(cluster=cluster, job_id=job_id, attempt=attempt, kind=kind, step=step, at=at,
                                  source=source, preset=preset[:32]))

    for load in loads:
        fact("loaded", load.step, load.preset)
    for mark in marks:
        if isinstance(mark, ProgressPoint) and mark.step is not None:
            if high is None:
                fact("first_step", mark.step, mark.preset)
            high = mark.step if high is None or mark.step > high else high
            if catch_up is not None and not caught and high >= catch_up and (high_before or -1) < catch_up:
                caught = True
                fact("caught_up", high, mark.preset)
        elif isinstance(mark, CheckpointMark) and mark.kind == "save":
            fact("saved" if mark.phase == "finished" else "save_started",
                 mark.step if mark.step is not None else high, mark.preset)
    return out


def from_reports(cluster: str, job_id: str, attempt: int, reports: Iterable[tuple[int, dt.datetime, bool]],
                 high_before: int | None, catch_up: int | None) -> list[CheckpointFact]:
    """The facts of relaunch.client reports (step, at, checkpoint_saved), in stream order."""
    out: list[CheckpointFact] = []
    high = high_before
    caught = False
    for step, at, saved in reports:
        if high is None:
            out.append(CheckpointFact(cluster=cluster, job_id=job_id, attempt=attempt, kind="first_step", step=step,
                                      at=at, source="client", preset="client"))
        high = step if high is None or step > high else high
        if catch_up is not None and not caught and high >= catch_up and (high_before or -1) < catch_up:
            caught = True
            out.append(CheckpointFact(cluster=cluster, job_id=job_id, attempt=attempt, kind="caught_up", step=high,
                                      at=at, source="client", preset="client"))
        if saved:
            out.append(CheckpointFact(cluster=cluster, job_id=job_id, attempt=attempt, kind="saved", step=step,
                                      at=at, source="client", preset="client"))
    return out
