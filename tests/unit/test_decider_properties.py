"""Property-based tests (hypothesis) of the decider's invariants, over whole job lives:
- a budget is never exceeded (attempts in all, restarts per class, one restart per attempt);
- an application fault is never restarted under the built-in policies (or any with no application budget);
- exclusions never leave the job unschedulable in its partition, and never pass the cap.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.attribution import NodeEvent, attribute
from relaunch.common.policies.model import FAULT_CLASSES
from relaunch.decider.domain.history import AttemptRecord, History, RestartRecord
from relaunch.decider.domain.policy import ADVICE_TTL, Budgets, Policy, decide
from relaunch.common.policies.policy_file import load_policies

START = dt.datetime(2026, 11, 29, 0, 0, tzinfo=dt.UTC)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DOMAINS = ("hardware", "infrastructure", "application", "resource", "scheduler", "unknown")
CATEGORIES = ("segfault", "nccl_network_error", "ecc_error", "slurm_time_limit", "slurm_preempted",
              "slurm_cancelled", "do_not_restart", "cuda_oom")
BUILTIN = load_policies()

policies = st.builds(
    Policy,
    max_attempts=st.integers(1, 12), max_attempts_cap=st.just(1000), max_exclude=st.integers(0, 4),
    straggler=st.booleans(),
    budgets=st.builds(Budgets, **{c: st.integers(0, 4) for c in FAULT_CLASSES}),
    storm_restarts=st.sampled_from([0, 2, 3]), storm_window_s=st.sampled_from([60, 3600]),
    stop_without_progress=st.booleans(), restart_on_time_limit=st.booleans(), restart_on_preemption=st.booleans(),
    ib_pair=st.sampled_from(["both", "one"]),
) | st.sampled_from(list(BUILTIN.policies.values()))

incidents = st.fixed_dictionaries({
    "kind": st.sampled_from(["crash", "crash", "crash", "hang", "straggler"]),
    "domain": st.sampled_from(DOMAINS),
    "action": st.sampled_from(["restart", "restart_excluding", "stop"]),
    "category": st.sampled_from(CATEGORIES),
    "step": st.none() | st.integers(0, 5000),
    "exit_code": st.none() | st.sampled_from([1, 93, 137]),
    "minutes": st.integers(0, 120),
    "same_attempt": st.booleans(),   # a further incident on the attempt just decided
    "converges": st.booleans(),      # whether the actuator carries out the restart before the next one
})


def anomaly(attempt: int, n: int, spec: dict, at: dt.datetime, nodes=()) -> AnomalyDetected:
    return AnomalyDetected(
        anomaly_id=f"c.1.{attempt}.{n}", cluster="c", job_id="1", attempt=attempt, kind=spec["kind"],
        source="log" if spec["kind"] == "crash" else "progress", signature_id=spec["category"],
        category=spec["category"], fault_domain=spec["domain"], action=spec["action"], summary="s",
        nodes=list(nodes), detected_at=at, last_step=spec["step"], exit_code=spec["exit_code"])


def live(policy: Policy, specs: list[dict]):
    """A job's life as the ledger would record it: each incident decided, each restart recorded (its
    Advice open until the actuator reports it), a stop or an observation ends it."""
    history, attempt, at = History(), 0, START
    outcomes = []
    for n, spec in enumerate(specs):
        at += dt.timedelta(minutes=spec["minutes"])
        if spec["same_attempt"] and attempt > 0 and history.restarts:
            target = attempt - 1  # a late incident on the attempt that was restarted
        else:
            target = attempt
        found = anomaly(target, n, spec, at)
        decision = decide(history, found, policy, at)
        outcomes.append((found, decision, history))
        if decision.kind == "restart":
            record = RestartRecord(target, decision.generation, decision.fault_class, at, status="PENDING",
                                   expires_at=decision.expires_at, exclude_nodes=decision.exclude_nodes)
            history = replace(history, last_generation=decision.generation,
                              decided_attempts=history.decided_attempts | {target},
                              attempts=history.attempts + (AttemptRecord(target, high_step=spec["step"]),),
                              restarts=history.restarts + (record,))
            if spec["converges"]:
                history = replace(history, restarts=history.restarts[:-1] + (replace(record, status="CONVERGED"),))
            attempt = target + 1
        elif decision.kind in ("stop", "observe"):
            break
    return outcomes


@SETTINGS
@given(policies, st.lists(incidents, min_size=1, max_size=25))
def test_a_budget_is_never_exceeded(policy, specs):
    outcomes = live(policy, specs)
    restarts = [(found, d) for found, d, _ in outcomes if d.kind == "restart"]
    assert len(restarts) <= max(policy.max_attempts - 1, 0)
    spent = Counter(d.fault_class for _, d in restarts)
    for klass, count in spent.items():
        assert count <= policy.budgets.of(klass), (klass, count)
    per_attempt = Counter(found.attempt for found, _ in restarts)
    assert all(count == 1 for count in per_attempt.values())  # a second incident joins, never restarts
    assert [d.generation for _, d in restarts] == list(range(1, len(restarts) + 1))
    for found, d, history in outcomes:
        assert d.rule  # every decision names its rule
        if d.kind == "join":
            joined = history.open_restart(found.attempt, found.detected_at)
            assert joined is not None and d.generation == joined.generation
        if d.kind == "restart":
            assert d.expires_at == found.detected_at + ADVICE_TTL


@SETTINGS
@given(st.sampled_from(sorted(BUILTIN.policies)), st.lists(incidents, min_size=1, max_size=25),
       st.integers(0, 24), st.data())
def test_an_application_fault_is_never_restarted_by_default(name, specs, at_index, data):
    policy = BUILTIN.policies[name]
    assert policy.budgets.application == 0
    # Any history the job may have reached, then an application fault (any action, any signature).
    outcomes = live(policy, specs)
    history = outcomes[min(at_index, len(outcomes) - 1)][2]
    spec = {**data.draw(incidents), "kind": "crash", "domain": "application"}
    attempt = data.draw(st.integers(0, 30))
    decision = decide(history, anomaly(attempt, 999, spec, START + dt.timedelta(days=1)), policy,
                      START + dt.timedelta(days=1))
    assert decision.kind != "restart", decision
    # And over a whole life: no application crash was ever restarted.
    for found, d, _ in outcomes:
        if found.kind == "crash" and found.fault_domain == "application":
            assert d.kind != "restart", d


NODES = [f"node{i}" for i in range(1, 13)]


@SETTINGS
@given(st.data())
def test_exclusions_never_leave_the_job_unschedulable(data):
    size = data.draw(st.integers(1, 8))
    job = NODES[:size]
    before = frozenset(data.draw(st.lists(st.sampled_from(NODES[size:]), max_size=4)))
    partition = data.draw(st.none() | st.integers(0, 16))
    policy = Policy(max_exclude=data.draw(st.integers(0, 6)), ib_pair=data.draw(st.sampled_from(["both", "one"])))
    now = START + dt.timedelta(hours=1)
    events = [NodeEvent(node, data.draw(st.sampled_from(["failed", "degraded"])), ("x",), now)
              for node in data.draw(st.lists(st.sampled_from(job), max_size=size, unique=True))]
    named = data.draw(st.lists(st.sampled_from(job), max_size=size, unique=True))
    history_jobs = {node: (("j1", now), ("j2", now)) for node in data.draw(st.lists(st.sampled_from(job),
                                                                                   max_size=2, unique=True))}
    spec = {"kind": "crash", "domain": data.draw(st.sampled_from(["hardware", "infrastructure", "unknown"])),
            "action": data.draw(st.sampled_from(["restart", "restart_excluding"])), "category": "ecc_error",
            "step": None, "exit_code": None}
    found = anomaly(1 if before else 0, 0, spec, now, nodes=named)
    earlier = (RestartRecord(0, 1, "hardware", START, status="CONVERGED", exclude_nodes=tuple(sorted(before))),
               ) if before else ()
    history = History(attempts=(AttemptRecord(found.attempt, nodes=tuple(job)),), restarts=earlier,
                      decided_attempts=frozenset({0}) if before else frozenset(), last_generation=len(earlier),
                      partition="gpu", partition_nodes=partition)
    use_attribution = data.draw(st.booleans())
    suspects = attribute(found, job, events, now, node_history=history_jobs, ib_pair=policy.ib_pair) \
        if use_attribution else None
    decision = decide(history, found, policy, now, suspects)
    assert decision.kind == "restart"
    new = set(decision.exclude_nodes) - before
    assert len(decision.exclude_nodes) <= policy.max_exclude
    assert set(decision.exclude_nodes) <= set(job) | set(named)
    if suspects is not None:
        assert set(decision.exclude_nodes) <= {s.node for s in suspects if s.excluded}
    if partition is not None:
        if size <= partition - len(before):
            assert size <= partition - len(before | set(decision.exclude_nodes)), decision.reason
        else:
            assert not new  # already too small: nothing more is left out
    for node in decision.left_in:
        assert node not in decision.exclude_nodes and node in decision.reason.split("; left in ", 1)[1]
