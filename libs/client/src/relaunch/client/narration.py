"""Plain-words narration of one job's recovery, from live relaunch messages (used by `relaunch demo`)."""

from __future__ import annotations

import json
import re

from relaunch.common.schemas import Advice, AnomalyDetected, AuditEntry, JobObserved, Message, ReconcileStatus

STEP_WORDS = {
    "requeuehold": "requeued the failed attempt in held state (Slurm keeps the job id and counts a restart)",
    "exclude": "excluded the suspect nodes from the next attempt",
    "release": "released the hold",
    "start_now": "asked Slurm to start it now instead of after its 120 s requeue delay",
    "cancel": "cancelled the job",
}


def describe(msg: Message, last_state: dict[str, str]) -> str | None:
    """One line for a person, or None when the message adds nothing new."""
    if isinstance(msg, JobObserved):
        key = f"{msg.restarts}:{msg.state}"
        if last_state.get(msg.job_id) == key:
            return None
        last_state[msg.job_id] = key
        where = f" on {','.join(msg.nodes)}" if msg.nodes and msg.state == "RUNNING" else ""
        return f"Slurm      attempt {msg.restarts} is {msg.state}{where}"
    if isinstance(msg, AnomalyDetected):
        line = f"detector   attempt {msg.attempt} crashed: {msg.category} ({msg.fault_domain} fault) - {msg.summary}"
        for ev in msg.evidence[:1]:
            line += f"\n             evidence: {ev.text.strip()[:160]!r} in {ev.path.rsplit('/', 1)[-1]}"
        return line
    if isinstance(msg, Advice):
        excl = f", without {', '.join(msg.exclude_nodes)}" if msg.exclude_nodes else ""
        return f"decider    decided to {msg.operation}{excl}: {msg.reason}"
    if isinstance(msg, ReconcileStatus):
        if msg.status == "PENDING":
            return f"actuator   {STEP_WORDS.get(msg.step, msg.step)}"
        return f"actuator   {msg.status}: {msg.reason} - {msg.detail}"
    if isinstance(msg, AuditEntry) and msg.service != "actuator":
        return f"{msg.service:<10} {msg.action}: {audit_words(msg.detail)}"
    return None


def audit_words(detail: str) -> str:
    """An audit entry's detail for a person: its reason when it has one, else its fields as
    `key value` pairs; never the raw JSON (issue 40)."""
    try:
        data = json.loads(detail)
    except ValueError:
        return detail
    if not isinstance(data, dict):
        return detail
    if data.get("reason"):
        return str(data["reason"])
    return ", ".join(f"{key.replace('_', ' ')} {', '.join(map(str, value)) if isinstance(value, list) else value}"
                     for key, value in data.items() if value not in (None, "", [], {})) or "-"


_STARTED = re.compile(r"attempt (\d+) .*started_at=([0-9.]+)")
_CRASHED = re.compile(r"crashing at=([0-9.]+)")


def recovery_seconds(log_text: str) -> float | None:
    """From the demo job's own timestamps: the failure line to the next attempt's first line (attempt 1,
    or a later one when Slurm refused attempt 1's launch: a refused attempt prints nothing)."""
    crashed = [float(m.group(1)) for m in _CRASHED.finditer(log_text)]
    started = {int(m.group(1)): float(m.group(2)) for m in _STARTED.finditer(log_text)}
    later = [started[n] for n in sorted(started) if n >= 1]
    if not crashed or not later:
        return None
    return later[0] - crashed[0]
