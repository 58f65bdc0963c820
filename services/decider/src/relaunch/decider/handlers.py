"""Bus wiring of the decider: parse -> load (row-locked) -> decide (pure) -> save -> publish (outbox)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import replace

from prometheus_client import Counter

from relaunch.common import subjects
from relaunch.common.outcomes import Delivery, utcnow
from relaunch.common.errors import TemporaryError
from relaunch.common.optin import parse_comment
from relaunch.common.policies.policy_file import load_policies
from relaunch.common.policies.policy_set import PolicySet, resolve
from relaunch.common.schemas import Advice, AnomalyDetected, AuditEntry, JobObserved, NodeHealth, ReconcileStatus

from .adapters.ledger import FINAL_STATES, JobTx, Ledger
from .domain import attribution, reputation
from .domain.attribution import Suspect
from .domain.policy import Decision, Policy, decide
from .outbox import OutboxPublisher

log = logging.getLogger(__name__)

DECISIONS = Counter("relaunch_decisions_total", "Decisions taken", ["kind", "rule"])
ADVICE = Counter("relaunch_advice_total", "Advice issued (committed to the ledger and its outbox), by operation",
                 ["operation"])

WAIT_FOR_LAUNCH_VERDICT_DELIVERIES = 10
"""A failure the scheduler reported on a restarted attempt (no log line explains it) waits, while the
Advice that began the attempt is still open, for the actuator to say whether Slurm refused that
attempt's launch (then it spends no attempt), up to this many deliveries (about 1 s apart)."""
WAIT_FOR_EXIT_CODE_DELIVERIES = 5
"""A failure the scheduler reported is decided only once the decider's own copy of that observation
(with its exit code: 93 means do not restart) is in the ledger, or after this many deliveries. The
two travel on different consumers, so either may come first."""
WAIT_FOR_NODES_DELIVERIES = 10
"""An anomaly from a running attempt's log or progress is attributed (which nodes to leave out) only once
the ledger knows the attempt's nodes, or after this many deliveries (about 0.5 s apart). The observation
that carries them travels on another consumer, and an anomaly that came first would otherwise be
attributed against no nodes and exclude none (docs/policy.md, "Attribution")."""


class Decider:
    def __init__(self, ledger: Ledger, outbox: OutboxPublisher, policies: PolicySet | None = None,
                 node_history_half_life: dt.timedelta = reputation.HALF_LIFE) -> None:
        self.ledger, self.outbox = ledger, outbox
        self.half_life = node_history_half_life
        self.policies = policies if policies is not None else load_policies()

    async def on_job(self, obs: JobObserved, delivery: Delivery) -> None:
        await self.ledger.record_observation(obs, resolve(parse_comment(obs.comment), self.policies))

    async def on_anomaly(self, anomaly: AnomalyDetected, delivery: Delivery) -> None:
        try:
            await self._on_anomaly(anomaly, delivery)
        finally:
            # After the commit: each decision's audit entry (and an Advice) waits in the outbox.
            self.outbox.kick()

    async def _on_anomaly(self, anomaly: AnomalyDetected, delivery: Delivery) -> None:
        now = utcnow()
        # Three round trips before the commit: the job locked with the anomaly recorded (rolled back if
        # it must wait, below), everything the decision reads, and everything it writes.
        async with self.ledger.anomaly_tx(anomaly) as tx:
            if not tx.row.get("comment"):
                # The observer publishes JobObserved before any anomaly can exist; wait for it.
                raise TemporaryError("job not observed yet; its policy is unknown", delay=1.0)
            # The anomaly's step and exit code are the attempt's already; the waits below read nothing
            # that they changed. The nodes attributed: the attempt's as the ledger knows them, else the
            # anomaly's own.
            history, override, events, node_history = await tx.read_for(
                anomaly, anomaly.detected_at - attribution.WINDOW, now - reputation.horizon(self.half_life))
            record = history.attempt(anomaly.attempt)
            if (anomaly.source == "scheduler" and anomaly.exit_code is None
                    and (record is None or record.state not in FINAL_STATES)
                    and delivery.num_delivered < WAIT_FOR_EXIT_CODE_DELIVERIES):
                raise TemporaryError("the scheduler's report of this failure is not in the ledger yet", delay=1.0)
            if (anomaly.source == "scheduler" and history.launch_verdict_pending(anomaly.attempt, now) is not None
                    and delivery.num_delivered < WAIT_FOR_LAUNCH_VERDICT_DELIVERIES):
                raise TemporaryError("the actuator is still verifying this attempt's launch", delay=1.0)
            if (anomaly.source in ("log", "progress") and anomaly.action != "stop"
                    and delivery.num_delivered < WAIT_FOR_NODES_DELIVERIES
                    and not (record is not None and record.nodes)):
                raise TemporaryError("the attempt's nodes are not in the ledger yet", delay=0.5)
            if not tx.inserted:
                # Already in the ledger: its decision was taken and committed with it (one transaction).
                log.debug("anomaly %s already recorded and decided", anomaly.anomaly_id)
                return
            # Resolved at each decision, so a policy file changed (and the decider restarted) applies.
            policy = resolve(parse_comment(tx.row["comment"]), self.policies)
            if override is not None and override[0] == "observe":  # an operator's word beats the comment
                policy = replace(policy, observe_only=True, option_errors=(override[1],))
            job_nodes = list(record.nodes if record is not None and record.nodes else anomaly.nodes)
            suspects = attribution.attribute(anomaly, job_nodes, events, now, node_history=node_history,
                                             previous=history.implicated(anomaly.attempt - 1),
                                             ib_pair=policy.ib_pair, half_life=self.half_life)
            decision = decide(history, anomaly, policy, now, suspects)
            DECISIONS.labels(decision.kind, decision.rule).inc()
            async with tx.together():  # one statement
                advice = await self._record(tx, anomaly, policy, decision, suspects, now)
        if advice is not None:
            ADVICE.labels(advice.operation).inc()  # after the commit, so a rolled-back Advice is not counted

    async def _record(self, tx: JobTx, anomaly: AnomalyDetected, policy: Policy, decision: Decision,
                      suspects: list[Suspect], now: dt.datetime) -> Advice | None:
        """The decision's writes (inside `tx.together()`); the Advice issued, if any."""
        await tx.save_suspects(anomaly.attempt, suspects, decision.exclude_nodes, anomaly.anomaly_id, now)
        detail = {"attempt": anomaly.attempt, "rule": decision.rule, "reason": decision.reason,
                  "anomaly": anomaly.anomaly_id, "policy": policy.name, "fault_class": decision.fault_class}
        if decision.left_in:
            detail["left_in"] = list(decision.left_in)
        if decision.exclude_nodes:
            detail["exclude_nodes"] = list(decision.exclude_nodes)
        key = f"decider.{anomaly.anomaly_id}"
        refs = [f"anomaly:{anomaly.anomaly_id}"] + [
            f"node:{s.node}:{s.confidence:.2f}:{r}"[:500] for s in suspects for r in s.reasons]
        if decision.kind == "none":
            return None
        if decision.kind == "join":
            await tx.join_advice(decision.generation, refs)
            await tx.audit("join", {**detail, "generation": decision.generation}, key, now)
            log.info("job %s/%s attempt %d: %s joined advice generation %d", anomaly.cluster, anomaly.job_id,
                     anomaly.attempt, anomaly.anomaly_id, decision.generation)
            return None
        if decision.kind == "report":
            await tx.audit("report", detail, key, now)
            return None
        if decision.kind in ("stop", "observe"):
            await tx.audit(decision.kind, detail, key, now)
            await tx.set_verdict("stopped" if decision.kind == "stop" else "observing", decision.reason)
            log.info("job %s/%s attempt %d: %s (%s)", anomaly.cluster, anomaly.job_id, anomaly.attempt,
                     decision.kind, decision.reason)
            return None
        assert decision.expires_at is not None
        # The job's verdict is "recovering" (save_advice) until the actuator says what became of it,
        # a terminate's too (Ledger.record_reconcile).
        operation = "terminate" if decision.kind == "terminate" else "restart"
        advice = Advice(
            cluster=anomaly.cluster, job_id=anomaly.job_id, attempt=anomaly.attempt,
            generation=decision.generation, operation=operation, exclude_nodes=list(decision.exclude_nodes),
            reason=decision.reason[:4000], evidence_refs=refs,
            policy=policy.as_dict(), issued_at=now, expires_at=decision.expires_at,
        )
        msg_id = f"advice.{advice.cluster}.{advice.job_id}.{advice.generation}"
        await tx.save_advice(advice, subjects.advice(advice.cluster, advice.job_id), msg_id, decision.fault_class)
        await tx.audit(operation, {**detail, "generation": advice.generation}, key, now)
        log.info("job %s/%s attempt %d: %s, advice generation %d", anomaly.cluster, anomaly.job_id,
                 anomaly.attempt, operation, advice.generation)
        return advice

    async def on_reconcile(self, status: ReconcileStatus, delivery: Delivery) -> None:
        await self.ledger.record_reconcile(status, dedupe_key=f"{subjects.EVENTS.name}.{delivery.stream_seq}")

    async def on_audit(self, entry: AuditEntry, delivery: Delivery) -> None:
        if entry.service == "decider":
            return  # written by this service, in the same transaction as the outbox entry that sent it
        await self.ledger.record_audit(entry)

    async def on_node(self, health: NodeHealth, delivery: Delivery) -> None:
        await self.ledger.record_node_health(health)
