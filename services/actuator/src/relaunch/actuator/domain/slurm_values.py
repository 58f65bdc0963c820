"""Reading the values of Slurm's JSON output, whatever release printed them: pure functions.

Slurm 22.05 (openapi/v0.0.38) and 23.02 and later (data_parser v0.0.39 ... v0.0.45) print the same
facts in different shapes (docs/slurm-versions.md has them side by side; the tests read fixtures
captured from real clusters of each release):

| fact | 22.05 | 23.02 and later |
|---|---|---|
| job state | `"FAILED"` | `["FAILED"]`, or a base state with flags: `["PENDING", "REQUEUE_HOLD"]` |
| a number (time, priority) | `1796103838` | `{"set": true, "infinite": false, "number": 1796103838}` |
| exit code | raw wait status (`256` = exit 1, `9` = SIGKILL) | `{"status": [...], "return_code": {...}, "signal": {"id": {...}, "name": ...}}` |

A value in any other shape raises `Unreadable`, which names the field and what was there: the caller
logs it, counts it and takes no action on that job rather than guess (a misread state could restart
what should stop).
"""

from __future__ import annotations

from typing import Any


class Unreadable(ValueError):
    """A value in a shape this code does not know."""

    def __init__(self, field: str, value: Any) -> None:
        self.field = field
        self.shape = _shape(value)
        super().__init__(f"{field}: cannot read a value of shape {self.shape}")


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "object with keys " + ",".join(sorted(map(str, value))[:8])
    if isinstance(value, list):
        return f"list of {len(value)}"
    return type(value).__name__


BASE_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
})
SHOWN_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
               "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")
"""Flags that, when set, are the state `scontrol show job` and Slurm 22.05's JSON print instead of the
base state (Slurm's job_state_string, in its order): a COMPLETING job reads "COMPLETING", not "FAILED".
Other flags (LAUNCH_FAILED, UPDATE_DB, POWER_UP_NODE, ...) leave the base state shown."""


def job_state(value: Any, field: str = "job_state") -> tuple[str, tuple[str, ...]]:
    """(the state as scontrol prints it, every flag) from either shape."""
    if isinstance(value, str) and value:
        return value, ()
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        bases = [v for v in value if v in BASE_STATES]
        flags = tuple(v for v in value if v not in BASE_STATES)
        if len(bases) != 1:
            raise Unreadable(field, value)
        shown = next((f for f in SHOWN_FLAGS if f in flags), bases[0])
        return shown, flags
    raise Unreadable(field, value)


def number(value: Any, field: str) -> int | None:
    """An integer, or None where Slurm says it is not set or infinite."""
    if isinstance(value, bool):
        raise Unreadable(field, value)
    if isinstance(value, int):
        return value
    if isinstance(value, dict) and {"set", "number"} <= value.keys():
        flag, n, infinite = value.get("set"), value.get("number"), value.get("infinite", False)
        if not isinstance(flag, bool) or not isinstance(infinite, bool) or isinstance(n, bool) \
                or not isinstance(n, int | float):
            raise Unreadable(field, value)
        return int(n) if flag and not infinite else None
    raise Unreadable(field, value)


def exit_code(value: Any, field: str = "exit_code") -> int | None:
    """The attempt's exit code as a shell reports it (128 + N when killed by signal N), or None."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return _from_wait_status(value)
    if isinstance(value, dict) and "return_code" in value:
        status = value.get("status", [])
        if not isinstance(status, list) or not all(isinstance(s, str) for s in status):
            raise Unreadable(field, value)
        signal = value.get("signal") or {}
        if not isinstance(signal, dict):
            raise Unreadable(field, value)
        signal_id = number(signal.get("id", {"set": False, "number": 0}), field + ".signal.id")
        if signal_id:
            return 128 + signal_id
        if "SIGNALED" in status:
            return None  # killed by a signal it does not name: no code to give
        return number(value["return_code"], field + ".return_code")
    raise Unreadable(field, value)


def _from_wait_status(status: int) -> int:
    if status & 0x7F:
        return 128 + (status & 0x7F)
    return (status >> 8) & 0xFF


def text(value: Any, field: str) -> str:
    """A string field; absent or null is ''."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise Unreadable(field, value)


def integer(value: Any, field: str) -> int:
    """A count that is always set (restart_cnt, job_id): an int in every release so far."""
    n = number(value, field)
    if n is None:
        raise Unreadable(field, value)
    return n
