"""Bus wiring of the decider: parse -> load (row-locked) -> decide (pure) -> save -> publish (outbox)."""

from __future__ import annotations

import logging

from prometheus_client import Counter

from relaunch.common import subjects
from relaunch.common.bus import Delivery, utcnow
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import Advice, AnomalyDetected, AuditEntry, JobObserved, NodeHealth, ReconcileStatus

from .adapters.ledger import Ledger
from .domain import attribution
from .domain.policy import decide
from .outbox import OutboxPublisher

log = logging.getLogger(__name__)

DECISIONS = Counter("relaunch_decisions_total", "Decisions taken", ["kind", "rule"])


class Decider:
    def __init__(self, ledger: Ledger, outbox: OutboxPublisher) -> None:
        self.ledger, self.outbox = ledger, outbox

    async def on_job(self, obs: JobObserved, delivery: Delivery) -> None:
        await self.ledger.record_observation(obs)

    async def on_anomaly(self, anomaly: AnomalyDetected, delivery: Delivery) -> None:
        now = utcnow()
        async with self.ledger.job_tx(anomaly.cluster, anomaly.job_id) as tx:
            if not tx.row.get("comment"):
                # The observer publishes JobObserved before any anomaly can exist; wait for it.
                raise TemporaryError("job not observed yet; its policy is unknown", delay=1.0)
            await tx.save_anomaly(anomaly)
            policy = tx.policy()
            job_nodes = await tx.attempt_nodes(anomaly.attempt) or list(anomaly.nodes)
            events = await tx.node_events(job_nodes, anomaly.detected_at - attribution.WINDOW)
            suspects = attribution.attribute(anomaly, job_nodes, events, now)
            decision = decide(await tx.history(), anomaly, policy, now, suspects)
            DECISIONS.labels(decision.kind, decision.rule).inc()
            detail = {"attempt": anomaly.attempt, "rule": decision.rule, "reason": decision.reason,
                      "anomaly": anomaly.anomaly_id}
            key = f"decider.{anomaly.anomaly_id}"
            if decision.kind == "none":
                return
            if decision.kind == "report":
                await tx.audit("report", detail, key, now)
                return
            if decision.kind in ("stop", "observe"):
                await tx.audit(decision.kind, detail, key, now)
                await tx.set_verdict("stopped" if decision.kind == "stop" else "observing", decision.reason)
                log.info("job %s/%s attempt %d: %s (%s)", anomaly.cluster, anomaly.job_id, anomaly.attempt,
                         decision.kind, decision.reason)
                return
            assert decision.expires_at is not None
            advice = Advice(
                cluster=anomaly.cluster, job_id=anomaly.job_id, attempt=anomaly.attempt,
                generation=decision.generation, operation="restart", exclude_nodes=list(decision.exclude_nodes),
                reason=decision.reason[:4000],
                evidence_refs=[f"anomaly:{anomaly.anomaly_id}"] + [
                    f"node:{s.node}:{s.confidence:.1f}:{r}"[:500] for s in suspects for r in s.reasons],
                policy=policy.as_dict(), issued_at=now, expires_at=decision.expires_at,
            )
            msg_id = f"advice.{advice.cluster}.{advice.job_id}.{advice.generation}"
            await tx.save_advice(advice, subjects.advice(advice.cluster, advice.job_id), msg_id)
            await tx.audit("restart", {**detail, "generation": advice.generation}, key, now)
            log.info("job %s/%s attempt %d: restart, advice generation %d", anomaly.cluster, anomaly.job_id,
                     anomaly.attempt, advice.generation)
        self.outbox.kick()

    async def on_reconcile(self, status: ReconcileStatus, delivery: Delivery) -> None:
        await self.ledger.record_reconcile(status, dedupe_key=f"{subjects.EVENTS.name}.{delivery.stream_seq}")

    async def on_audit(self, entry: AuditEntry, delivery: Delivery) -> None:
        await self.ledger.record_audit(entry)

    async def on_node(self, health: NodeHealth, delivery: Delivery) -> None:
        await self.ledger.record_node_health(health)
