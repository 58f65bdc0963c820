"""Bus wiring of the decider: parse -> load (row-locked) -> decide (pure) -> save -> publish (outbox)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import replace

from prometheus_client import Counter

from relaunch.common import job_states, subjects, telemetry
from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow
from relaunch.common.errors import TemporaryError
from relaunch.common.hangs.triggers import wants_evidence
from relaunch.common.optin import parse_comment
from relaunch.common.policies.policy_file import load_policies
from relaunch.common.policies.policy_set import PolicySet, resolve
from relaunch.common.schemas import (Advice, AnomalyDetected, AuditEntry, CheckpointFact, HangEvidence, JobObserved,
                                     NodeHealth, ReconcileStatus)

from relaunch.common.goodput import Save, completed_saves

from .adapters import checkpoint_store, hang_evidence_store
from .adapters.ledger import JobTx, Ledger
from .domain import attribution, hang_verdicts, reputation, resumes
from .domain.attribution import Suspect
from .domain.history import History
from .domain.policy import Decision, Policy, decide
from .group_commit import GroupCommit
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



Pending = tuple[AnomalyDetected, Delivery, "str | None"]
"""An anomaly waiting for its batch: with its delivery and the traceparent of its message's span."""

_NOT_OBSERVED = "job not observed yet; its policy is unknown"


class _BeginAgain(Exception):
    """Raised inside a batch's transaction to roll it back: some of its anomalies must wait."""


class Decider:
    def __init__(self, ledger: Ledger, outbox: OutboxPublisher, policies: PolicySet | None = None,
                 node_history_half_life: dt.timedelta = reputation.HALF_LIFE, *, batch: int = 64,
                 hang_evidence_wait: dt.timedelta = dt.timedelta(0)) -> None:
        """`hang_evidence_wait`: how long after its detection a hang the actuator reads the ranks of
        (hangs.triggers.wants_evidence) waits for that evidence (DeciderSettings.hang_evidence_wait_s);
        none came, it is decided as without it (fail closed). 0 (a Decider of tests and benches without an
        actuator): hang evidence is not read at all, and a hang is submitted to its batch at once."""
        self.ledger, self.outbox = ledger, outbox
        self.batches: GroupCommit[Pending, Advice | None] = GroupCommit(self._decide_batch, max_batch=batch)
        self.half_life = node_history_half_life
        self.policies = policies if policies is not None else load_policies()
        self.hang_evidence_wait = hang_evidence_wait
        self._hang_evidence: dict[str, tuple[dict | None, str | None]] = {}
        """anomaly id -> (its hang evidence, the place the attempt before's blamed), while it is decided."""
        self._saves: dict[str, tuple[Save, ...]] = {}
        """anomaly id -> the job's checkpoints known saved (the no_checkpoint rule, Advice.resume_step),
        while it is decided."""

    async def on_job(self, obs: JobObserved, delivery: Delivery) -> None:
        await self.ledger.record_observation(obs, resolve(parse_comment(obs.comment), self.policies))

    async def on_anomaly(self, anomaly: AnomalyDetected, delivery: Delivery) -> None:
        if self.hang_evidence_wait and wants_evidence(anomaly):
            await self._await_hang_evidence(anomaly)
        try:
            # Decided with the other jobs' anomalies that came with it (group_commit, _decide_batch).
            advice = await self.batches.submit((anomaly, delivery, telemetry.current_traceparent()))
        finally:
            # After the commit: each decision's audit entry (and an Advice) waits in the outbox.
            self.outbox.kick()
            self._hang_evidence.pop(anomaly.anomaly_id, None)
            self._saves.pop(anomaly.anomaly_id, None)
        if advice is not None:
            ADVICE.labels(advice.operation).inc()  # after the commit, so a rolled-back Advice is not counted

    async def _await_hang_evidence(self, anomaly: AnomalyDetected) -> None:
        """The anomaly's hang evidence (and the attempt before's blamed place) for `_judge`, or a
        TemporaryError while it may still come."""
        pool = self.ledger.pool
        found = await hang_evidence_store.of_anomaly(pool, anomaly.anomaly_id)
        if found is None and utcnow() - anomaly.detected_at < self.hang_evidence_wait:
            raise TemporaryError("waiting for the actuator's hang evidence", delay=1.0)
        before = await hang_evidence_store.place_before(pool, anomaly.cluster, anomaly.job_id, anomaly.attempt)
        self._hang_evidence[anomaly.anomaly_id] = (found, before)

    async def _read_saves(self, anomalies: list[AnomalyDetected]) -> None:
        """The checkpoints each anomaly's job is known to have saved (for `_judge`), in one query for a
        batch. Read before the batch's transaction, not in on_anomaly: an await there would let a job's
        second anomaly overtake its first into the batch."""
        facts = await checkpoint_store.of_jobs(self.ledger.pool, sorted({(a.cluster, a.job_id) for a in anomalies}))
        for a in anomalies:
            self._saves[a.anomaly_id] = completed_saves(facts.get((a.cluster, a.job_id), ()), {a.attempt: a.last_step})

    async def on_hang_evidence(self, evidence: HangEvidence, delivery: Delivery) -> None:
        await hang_evidence_store.record(self.ledger.pool, evidence)

    async def on_checkpoint(self, fact: CheckpointFact, delivery: Delivery) -> None:
        await checkpoint_store.record(self.ledger.pool, fact)
        if fact.attempt >= 1 and fact.kind in ("loaded", "first_step"):
            await self._note_resume(fact)

    async def _note_resume(self, fact: CheckpointFact) -> None:
        """The ledger's note of whether a restarted attempt resumed from the checkpoint its restart Advice
        expected (audit `resumed`, once per attempt: its first fact that says where it began)."""
        expected = await checkpoint_store.expected_resume(self.ledger.pool, fact.cluster, fact.job_id,
                                                          fact.attempt - 1)
        detail = resumes.resumed(fact, expected) if expected is not None else None
        if detail is not None:
            await self.ledger.record_audit(AuditEntry(
                cluster=fact.cluster, job_id=fact.job_id, service="decider", action="resumed",
                detail=resumes.detail_text(detail), at=fact.at,
                idempotency_key=f"decider.resumed.{fact.cluster}.{fact.job_id}.{fact.attempt}"))

    async def _decide_batch(self, batch: list[tuple[Pending, asyncio.Future[Advice | None]]]) -> None:
        """Decide a batch of anomalies, a job's first in one transaction (`_decide_round`), a second of
        the same job in the next (the consumer's lanes let one message of a job in at a time, so only
        callers of on_anomaly outside the service, tests and the bench, make them), so that each
        decision sees the one before it, as one at a time."""
        while batch:
            seen: set[tuple[str, str]] = set()
            now, later = [], []
            for item in batch:
                key = (item[0][0].cluster, item[0][0].job_id)
                (later if key in seen else now).append(item)
                seen.add(key)
            await self._decide_round(now)
            batch = later

    async def _decide_round(self, batch: list[tuple[Pending, asyncio.Future[Advice | None]]]) -> None:
        """Decide anomalies of different jobs in one transaction (Ledger.anomaly_batch). An anomaly that
        must wait is taken out and the rest begun again (its recording rolled back, as alone); if the
        batch fails otherwise, each anomaly is decided alone, so that only a bad one gets its error (a
        dead letter)."""
        live = list(batch)
        try:
            for _ in range(3):
                if not live:
                    return
                await self._read_saves([a for (a, _, _), _ in live])
                now = utcnow()
                waiting: dict[int, TemporaryError] = {}
                decided: list[tuple[int, Advice | None]] = []
                try:
                    async with self.ledger.anomaly_batch(
                            [a for (a, _, _), _ in live], [a.detected_at - attribution.WINDOW for (a, _, _), _ in live],
                            now - reputation.horizon(self.half_life), [t for (_, _, t), _ in live]) as btx:
                        judged = self._judge_batch([item for item, _ in live], btx.items, now, waiting)
                        if waiting:
                            raise _BeginAgain
                        async with btx.together():  # one statement for all
                            for i, tx, verdict in judged:
                                if verdict is None:
                                    decided.append((i, None))
                                    continue
                                policy, decision, suspects = verdict
                                DECISIONS.labels(decision.kind, decision.rule).inc()
                                anomaly = live[i][0][0]
                                decided.append((i, await self._record(tx, anomaly, policy, decision, suspects, now)))
                except _BeginAgain:
                    for i, wait in waiting.items():
                        live[i][1].set_exception(wait)
                    live = [item for i, item in enumerate(live) if i not in waiting]
                    continue
                for i, advice in decided:
                    live[i][1].set_result(advice)
                return
        except Exception as exc:  # noqa: BLE001 - each anomaly alone: only a bad one fails
            log.warning("a batch of %d anomalies failed (%s: %s); deciding them one at a time", len(live),
                        type(exc).__name__, exc)
        await asyncio.gather(*(self._alone(item, future) for item, future in live if not future.done()))

    def _judge_batch(self, pending: list[Pending], reads: list, now: dt.datetime,
                     waiting: dict[int, TemporaryError]) -> list[tuple[int, JobTx, tuple | None]]:
        """`_judge` of each anomaly of a batch, with what `Ledger.anomaly_batch` read for it: (index, its
        JobTx, the verdict) of those judged, and each one that must wait put in `waiting` by index. Each
        decision's node history has the exclusions of the batch's decisions before it, as one at a time."""
        judged = []
        # cluster -> node -> the exclusions of the batch's decisions so far (reputation.Exclusion), newest first
        excluded: dict[str, dict[str, list[reputation.Exclusion]]] = {}
        for i, ((anomaly, delivery, _), (tx, history, override, events, node_history)) in enumerate(
                zip(pending, reads, strict=True)):
            node_history = reputation.with_exclusions(node_history, excluded.get(anomaly.cluster, {}))
            try:
                verdict = self._judge(anomaly, delivery, tx, history, override, events, node_history, now)
            except TemporaryError as wait:
                waiting[i] = wait
                continue
            judged.append((i, tx, verdict))
            if verdict is None or verdict[1].kind not in ("restart", "terminate"):
                continue
            for node in verdict[1].exclude_nodes:
                found = [s for s in verdict[2] if s.node == node]
                if reputation.counts_in_history(node, (r for s in found for r in s.reasons)):
                    exclusion = reputation.Exclusion(anomaly.job_id, now, tx.row.get("user_id"),
                                                     any(s.corroborated for s in found))
                    excluded.setdefault(anomaly.cluster, {}).setdefault(node, []).insert(0, exclusion)
        return judged

    async def _alone(self, item: Pending, future: asyncio.Future[Advice | None]) -> None:
        anomaly, delivery, _ = item
        try:
            future.set_result(await self._on_anomaly(anomaly, delivery))
        except Exception as exc:  # noqa: BLE001 - the message's outcome (nak, dead letter)
            future.set_exception(exc)

    async def _on_anomaly(self, anomaly: AnomalyDetected, delivery: Delivery) -> Advice | None:
        """One anomaly decided alone: five round trips (BEGIN, the job locked with the anomaly recorded,
        everything the decision reads, everything it writes, COMMIT)."""
        await self._read_saves([anomaly])
        now = utcnow()
        async with self.ledger.anomaly_tx(anomaly) as tx:
            if not tx.row.get("comment"):
                raise TemporaryError(_NOT_OBSERVED, delay=1.0)  # before the read: a round trip saved
            read = await tx.read_for(
                anomaly, anomaly.detected_at - attribution.WINDOW, now - reputation.horizon(self.half_life))
            verdict = self._judge(anomaly, delivery, tx, *read, now)
            if verdict is None:
                return None
            policy, decision, suspects = verdict
            DECISIONS.labels(decision.kind, decision.rule).inc()
            async with tx.together():  # one statement
                return await self._record(tx, anomaly, policy, decision, suspects, now)

    def _judge(self, anomaly: AnomalyDetected, delivery: Delivery, tx: JobTx, history: History,
               override: tuple[str, str] | None, events: list, node_history: dict,
               now: dt.datetime) -> tuple[Policy, Decision, list[Suspect]] | None:
        """The decision on `anomaly`, its job locked in `tx` with the anomaly recorded, and `history`,
        `override`, `events`, `node_history` read after that: None when the anomaly was decided before;
        TemporaryError raised when it must wait (the caller rolls its recording back)."""
        if not tx.row.get("comment"):
            # The observer publishes JobObserved before any anomaly can exist; wait for it.
            raise TemporaryError(_NOT_OBSERVED, delay=1.0)
        # The anomaly's step and exit code are the attempt's already; the waits below read nothing
        # that they changed. The nodes attributed: the attempt's as the ledger knows them, else the
        # anomaly's own.
        record = history.attempt(anomaly.attempt)
        if (anomaly.source == "scheduler" and anomaly.exit_code is None
                and (record is None or record.state not in job_states.ATTEMPT_ENDED)
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
            return None
        # Resolved at each decision, so a policy file changed (and the decider restarted) applies.
        policy = resolve(parse_comment(tx.row["comment"]), self.policies)
        if override is not None and override[0] == "observe":  # an operator's word beats the comment
            policy = replace(policy, observe_only=True, option_errors=(override[1],))
        job_nodes = list(record.nodes if record is not None and record.nodes else anomaly.nodes)
        suspects = attribution.attribute(anomaly, job_nodes, events, now, node_history=node_history,
                                         previous=history.implicated(anomaly.attempt - 1),
                                         ib_pair=policy.ib_pair, half_life=self.half_life,
                                         slurm_state=record.state if record is not None else "")
        history = replace(history, saves=self._saves.get(anomaly.anomaly_id, ()))
        hang, place_before = self._hang_evidence.get(anomaly.anomaly_id, (None, None))
        suspects = hang_verdicts.with_hang_suspects(suspects, hang, job_nodes)
        deadlock = hang_verdicts.deadlock(hang, place_before)
        return policy, decide(history, anomaly, policy, now, suspects, deadlock), suspects

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
        if decision.resume_step is not None:
            detail["resume_step"] = decision.resume_step
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
        if decision.would is not None:  # observe: what act mode would have done, in the ledger's audit
            detail["would"] = {"action": decision.would.kind, "rule": decision.would.rule,
                               "exclude_nodes": list(decision.would.exclude_nodes), "reason": decision.would.reason}
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
            resume_step=decision.resume_step if operation == "restart" else None,
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
