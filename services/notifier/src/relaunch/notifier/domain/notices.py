"""notices_of_*(message) -> the Notices a message means for a person. Pure.

What is worth a person's attention (docs/notifications.md), and where it comes from:
  job_stopped          the decider's audit entry of a stop or terminate decision (the job will not be
                       restarted; the reason says why)
  node_excluded        the decider's audit entry of a restart or terminate that leaves nodes out
  advice_abandoned     the actuator's reconcile status ABANDONED (relaunch gave up carrying out an Advice)
  relaunch_unhealthy   a dead letter: a service could not accept a message (relaunch itself needs a look)

Invariants:
- each Notice has an idempotency key, the same however often its message is delivered: the kind and
  the id the message already carries (the audit entry's idempotency key, the Advice generation, the
  dead letter's stream sequence). A receiver that saw a key may drop the repeat;
- a message the notifier does not care about gives no Notice (and is acked);
- the notifier's own dead letters give no Notice: a webhook that refuses every post would otherwise
  feed itself a notice about each refusal, for ever.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from relaunch.common.schemas import AuditEntry, DeadLetter, ReconcileStatus

KINDS = ("job_stopped", "node_excluded", "advice_abandoned", "relaunch_unhealthy")
STOP_ACTIONS = ("stop", "terminate")
EXCLUDING_ACTIONS = ("restart", "terminate")
SELF = "notifier"


@dataclass(frozen=True)
class Notice:
    kind: str
    key: str
    """The idempotency key (header Idempotency-Key and payload field relaunch.idempotency_key)."""
    cluster: str
    job_id: str
    title: str
    text: str
    at: dt.datetime
    nodes: tuple[str, ...] = ()


def _detail(entry: AuditEntry) -> dict:
    try:
        found = json.loads(entry.detail) if entry.detail else {}
    except ValueError:
        return {"reason": entry.detail}
    return found if isinstance(found, dict) else {"reason": entry.detail}


def notices_of_audit(entry: AuditEntry) -> list[Notice]:
    if entry.service != "decider":
        return []
    detail = _detail(entry)
    reason = str(detail.get("reason") or entry.action)
    out = []
    where = f"job {entry.job_id} on {entry.cluster}"
    if entry.action in STOP_ACTIONS:
        what = "stopped" if entry.action == "stop" else "cancelled (it was hung)"
        out.append(Notice("job_stopped", f"job_stopped:{entry.idempotency_key}", entry.cluster, entry.job_id,
                          f"relaunch {what} {where}", reason, entry.at))
    nodes = tuple(str(n) for n in detail.get("exclude_nodes") or ())
    if entry.action in EXCLUDING_ACTIONS and nodes:
        out.append(Notice("node_excluded", f"node_excluded:{entry.idempotency_key}", entry.cluster, entry.job_id,
                          f"relaunch left {', '.join(nodes)} out of {where}", reason, entry.at, nodes))
    return out


def notices_of_reconcile(status: ReconcileStatus) -> list[Notice]:
    if status.status != "ABANDONED":
        return []
    text = status.reason + (f" ({status.detail})" if status.detail else "")
    return [Notice("advice_abandoned", f"advice_abandoned:{status.cluster}.{status.job_id}.{status.generation}",
                   status.cluster, status.job_id,
                   f"relaunch gave up Advice generation {status.generation} of job {status.job_id} on "
                   f"{status.cluster}", text, status.at)]


def notices_of_dead_letter(letter: DeadLetter, stream_seq: int) -> list[Notice]:
    if letter.service == SELF:
        return []
    return [Notice("relaunch_unhealthy", f"relaunch_unhealthy:dlq.{stream_seq}", "", "",
                   f"relaunch {letter.service} could not accept a message",
                   f"{letter.reason} (subject {letter.subject}; dead letter {stream_seq} in stream DLQ)", letter.at)]
