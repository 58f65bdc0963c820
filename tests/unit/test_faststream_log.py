"""FastStream's supervisor noise stays out of the services' logs (connection.SupervisorNoise); what it
says about any other failure stays in."""

from __future__ import annotations

import logging

import nats.errors

from relaunch.common import connection


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the exception with its traceback, as the supervisor has it
        return caught


def test_the_supervisors_fetch_timeouts_and_task_callbacks_are_not_logged_and_other_failures_are():
    logger = logging.getLogger("relaunch.faststream")  # the logger broker_for gives FastStream
    kept = _Kept()
    logger.addHandler(kept)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    retrying = ("Task-10 raised an exception, retrying...\nIf this behavior causes issues, you can disable it via "
                "setting the FASTSTREAM_SUPERVISOR_DISABLED env to 1.")
    try:
        logger.log(logging.INFO, "callback for Task-1001 is being executed...")
        logger.log(logging.ERROR, retrying, exc_info=_raised(TimeoutError()))
        logger.log(logging.ERROR, retrying, exc_info=_raised(ValueError("a real bug")))
        logger.log(logging.ERROR, retrying, exc_info=_raised(nats.errors.ConnectionClosedError()))
        logger.log(logging.INFO, "callback for a subscriber of detector-jobs")  # not the supervisor's line
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
    said = [(r.levelno, r.getMessage().splitlines()[0], type(r.exc_info[1]).__name__ if r.exc_info else None)
            for r in kept.records]
    assert said == [(logging.ERROR, "Task-10 raised an exception, retrying...", "ValueError"),
                    (logging.ERROR, "Task-10 raised an exception, retrying...", "ConnectionClosedError"),
                    (logging.INFO, "callback for a subscriber of detector-jobs", None)]
    assert any(isinstance(f, connection.SupervisorNoise) for f in logger.filters)
