"""decide(): one table row per rule, each stop naming its rule; then invariants over random histories."""

import datetime as dt
import random
from dataclasses import replace

import pytest

from relaunch.common.schemas import AnomalyDetected
from relaunch.decider.domain.history import AttemptRecord, History, RestartRecord, fault_class
from relaunch.decider.domain.policy import Budgets, Policy, decide

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)


def anomaly(attempt=0, kind="crash", category="segfault", domain="unknown", action="restart", **kw):
    return AnomalyDetected(anomaly_id=f"c.1.{attempt}.{kind}", cluster="c", job_id="1", attempt=attempt, kind=kind,
                           source="progress" if kind != "crash" else "log", signature_id=category, category=category,
                           fault_domain=domain, action=action, summary="s", detected_at=NOW, **kw)


def restarts(*items):
    """(attempt, class, minutes ago) -> RestartRecord, generations in order."""
    return tuple(RestartRecord(a, g + 1, c, NOW - m * MIN) for g, (a, c, m) in enumerate(items))


def attempts(*steps, exit_codes=None):
    exit_codes = exit_codes or {}
    return tuple(AttemptRecord(i, NOW - (len(steps) - i) * 10 * MIN, high_step=s, exit_code=exit_codes.get(i))
                 for i, s in enumerate(steps))


BIG = Policy(max_attempts=20, max_attempts_cap=20)


def decided(attempt, status, expires=30 * MIN):
    """A History in which `attempt` got a restart Advice (generation 1) now in `status`."""
    advice = RestartRecord(attempt, 1, "unknown", NOW - MIN, status=status, expires_at=NOW + expires)
    return History(decided_attempts=frozenset({attempt}), last_generation=1, restarts=(advice,))

RULES = [
    # (name, history, anomaly, policy, expected kind, expected rule, words in the reason)
    ("user cancelled (ledger)", History(user_cancelled=True), anomaly(), BIG, "stop", "user_cancelled", "cancelled"),
    ("user cancelled (log)", History(), anomaly(category="slurm_cancelled", domain="scheduler", action="stop"), BIG,
     "stop", "user_cancelled", "never restarts"),
    ("exit code 93 (observed)", History(attempts=attempts(None, exit_codes={0: 93})), anomaly(domain="infrastructure"),
     BIG, "stop", "do_not_restart", "code 93"),
    ("exit code 93 (anomaly)", History(), anomaly(exit_code=93), BIG, "stop", "do_not_restart", "code 93"),
    ("do-not-restart line", History(), anomaly(category="do_not_restart", domain="application", action="stop"), BIG,
     "stop", "do_not_restart", "asked not to be restarted"),
    ("time limit off", History(), anomaly(category="slurm_time_limit", domain="scheduler"),
     replace(BIG, restart_on_time_limit=False), "stop", "time_limit", "time limit"),
    ("time limit on", History(), anomaly(category="slurm_time_limit", domain="scheduler"), BIG,
     "restart", "within_budget", "scheduler restart 1 of 10"),
    ("preemption off", History(), anomaly(category="slurm_preempted", domain="scheduler"),
     replace(BIG, restart_on_preemption=False), "stop", "preemption", "preempted"),
    ("preemption on", History(), anomaly(category="slurm_preempted", domain="scheduler"), BIG,
     "restart", "within_budget", "scheduler"),
    ("log unread", History(), anomaly(category="log_unread", action="stop"), BIG, "stop", "log_unread",
     "not restarted"),
    ("signature says stop", History(), anomaly(category="cuda_oom", domain="application", action="stop"), BIG,
     "stop", "fault_not_restartable", "fail the same way"),
    ("application fault, restart action", History(), anomaly(category="gpu_xid_application", domain="application"),
     BIG, "stop", "class_budget", "allows 0 application restart"),
    ("resource fault", History(), anomaly(category="x", domain="resource"), BIG, "stop", "class_budget", "resource"),
    ("hardware within budget", History(restarts=restarts((0, "hardware", 300))), anomaly(1, domain="hardware"), BIG,
     "restart", "within_budget", "hardware restart 2 of 5"),
    ("hardware budget spent", History(restarts=restarts(*[(i, "hardware", 300 - i) for i in range(5)])),
     anomaly(5, domain="hardware"), replace(BIG, storm_restarts=0), "stop", "class_budget", "5 already made"),
    ("other classes do not spend it", History(restarts=restarts(*[(i, "scheduler", 300 - i) for i in range(5)])),
     anomaly(5, domain="hardware"), replace(BIG, storm_restarts=0), "restart", "within_budget", "hardware restart 1"),
    ("hang budget: the hung job is cancelled", History(restarts=restarts((0, "hang", 300), (1, "hang", 200))),
     anomaly(2, kind="hang"), BIG, "terminate", "class_budget", "cancelled to release its nodes"),
    ("hang budget, terminate_hung off", History(restarts=restarts((0, "hang", 300), (1, "hang", 200))),
     anomaly(2, kind="hang"), replace(BIG, terminate_hung=False), "stop", "class_budget", "hang"),
    ("hung and cancelled by a user: nothing to cancel", History(user_cancelled=True), anomaly(kind="hang"), BIG,
     "stop", "user_cancelled", "cancelled"),
    ("a crash past max attempts is not cancelled (it is not running)", History(), anomaly(2), Policy(max_attempts=3),
     "stop", "max_attempts", "max_attempts=3"),
    ("max attempts", History(), anomaly(2), Policy(max_attempts=3), "stop", "max_attempts", "max_attempts=3"),
    ("storm, no steps", History(restarts=restarts((0, "infrastructure", 30), (1, "infrastructure", 20),
                                                  (2, "infrastructure", 10))),
     anomaly(3, domain="infrastructure"), BIG, "stop", "restart_storm", "no step reported"),
    ("storm, steps stuck", History(attempts=attempts(500, 500, 480, 500), restarts=restarts(
        (0, "infrastructure", 30), (1, "infrastructure", 20), (2, "infrastructure", 10))),
     anomaly(3, domain="infrastructure"), replace(BIG, stop_without_progress=False), "stop", "restart_storm",
     "best step 500 since, against 500 before"),
    ("no storm when the job progresses", History(attempts=attempts(100, 200, 300), restarts=restarts(
        (0, "infrastructure", 30), (1, "infrastructure", 20), (2, "infrastructure", 10))),
     anomaly(3, domain="infrastructure", last_step=400), BIG, "restart", "within_budget", ""),
    ("no storm when the restarts are old", History(restarts=restarts(
        (0, "infrastructure", 300), (1, "infrastructure", 200), (2, "infrastructure", 100))),
     anomaly(3, domain="infrastructure"), BIG, "restart", "within_budget", ""),
    ("storm rule off", History(restarts=restarts((0, "unknown", 3), (1, "unknown", 2), (2, "infrastructure", 1))),
     anomaly(3, domain="infrastructure"), replace(BIG, storm_restarts=0), "restart", "within_budget", ""),
    ("scheduler restarts are no storm", History(restarts=restarts(
        (0, "scheduler", 30), (1, "scheduler", 20), (2, "scheduler", 10))),
     anomaly(3, domain="infrastructure"), BIG, "restart", "within_budget", ""),
    ("a preemption is never a storm", History(restarts=restarts(
        (0, "infrastructure", 30), (1, "infrastructure", 20), (2, "infrastructure", 10))),
     anomaly(3, category="slurm_preempted", domain="scheduler"), BIG, "restart", "within_budget", ""),
    ("a preempted attempt had no time to progress", History(attempts=attempts(1000)),
     anomaly(1, category="slurm_preempted", domain="scheduler", last_step=990), BIG, "restart", "within_budget", ""),
    ("a time limit without progress stops", History(attempts=attempts(1000)),
     anomaly(1, category="slurm_time_limit", domain="scheduler", last_step=1000), BIG, "stop", "no_progress", ""),
    ("no progress (anomaly's step)", History(attempts=attempts(1000)), anomaly(1, last_step=950), BIG,
     "stop", "no_progress", "reached step 950, no further than the step 1000"),
    ("no progress (ledger's step)", History(attempts=attempts(1000, 1000)), anomaly(1), BIG,
     "stop", "no_progress", "step 1000"),
    ("progress", History(attempts=attempts(1000)), anomaly(1, last_step=1001), BIG, "restart", "within_budget", ""),
    ("progress unknown is not no progress", History(attempts=attempts(None)), anomaly(1, last_step=10), BIG,
     "restart", "within_budget", ""),
    ("progress rule off", History(attempts=attempts(1000)), anomaly(1, last_step=950),
     replace(BIG, stop_without_progress=False), "restart", "within_budget", ""),
    ("first attempt has nothing to compare", History(), anomaly(0, last_step=0), BIG, "restart", "within_budget", ""),
    ("a second incident joins the open advice", decided(0, "PENDING"), anomaly(0, kind="hang"), BIG,
     "join", "joins_open_advice", "joined advice generation 1"),
    ("even when the job is observe-only now", decided(0, "PENDING"), anomaly(0),
     Policy(observe_only=True, option_errors=("x",)), "join", "joins_open_advice", "no second restart"),
    ("a converged advice is not joined", decided(0, "CONVERGED"), anomaly(0), BIG, "none", "already_decided", ""),
    ("an abandoned advice is not joined", decided(0, "ABANDONED"), anomaly(0), BIG, "none", "already_decided", ""),
    ("an expired advice is not joined", decided(0, "PENDING", expires=-MIN), anomaly(0), BIG,
     "none", "already_decided", ""),
    ("a stopped attempt is not restarted", History(decided_attempts=frozenset({0})), anomaly(0), BIG,
     "none", "already_decided", ""),
    ("straggler blocked by a rule is reported", History(attempts=attempts(1000)),
     anomaly(1, kind="straggler", action="restart_excluding", nodes=["n2"], last_step=900),
     replace(BIG, straggler=True), "report", "no_progress", "no further"),
]


@pytest.mark.parametrize("name, history, found, policy, kind, rule, words", RULES, ids=[r[0] for r in RULES])
def test_each_rule(name, history, found, policy, kind, rule, words):
    decision = decide(history, found, policy, NOW)
    assert (decision.kind, decision.rule) == (kind, rule), decision.reason
    assert words in decision.reason
    assert decision.fault_class == fault_class(found)
    if kind == "restart":
        assert decision.generation == history.last_generation + 1 and decision.expires_at > NOW


def test_a_hang_and_a_straggler_have_classes_of_their_own():
    assert fault_class(anomaly(kind="hang", domain="infrastructure")) == "hang"
    assert fault_class(anomaly(kind="straggler")) == "straggler"
    assert fault_class(anomaly(domain="hardware")) == "hardware"
    assert Budgets().of("made-up") == Budgets().unknown


def test_exclusions_respect_the_cap_even_without_attribution():
    found = anomaly(action="restart_excluding", nodes=["n1", "n2", "n3"], domain="hardware")
    assert decide(History(), found, Policy(max_exclude=2), NOW).exclude_nodes == ("n1", "n2")
    assert decide(History(), found, Policy(max_exclude=0), NOW).exclude_nodes == ()


def test_the_effective_policy_is_flat_for_the_advice():
    flat = Policy().as_dict()
    assert flat["policy"] == "default" and flat["budget_application"] == 0 and flat["max_attempts"] == 3
    assert all(isinstance(v, int | str | bool) for v in flat.values())


# --- invariants over random histories (seeded: a failure reproduces) --------------------------------------

CLASSES = ("hardware", "infrastructure", "application", "resource", "scheduler", "unknown")


def random_case(rng: random.Random):
    policy = Policy(max_attempts=rng.randint(1, 30), max_attempts_cap=30,
                    budgets=Budgets(**{c: rng.randint(0, 4) for c in CLASSES}, hang=rng.randint(0, 4)),
                    storm_restarts=rng.choice([0, 2, 3]), storm_window_s=rng.choice([60, 3600]),
                    stop_without_progress=rng.random() < 0.5)
    history, when = History(), NOW - dt.timedelta(hours=10)
    outcomes = []
    for attempt in range(40):
        when += dt.timedelta(minutes=rng.randint(1, 90))
        kind = rng.choice(["crash"] * 5 + ["hang"])
        domain = rng.choice(CLASSES)
        action = rng.choice(["restart", "restart", "restart_excluding", "stop"])
        step = rng.choice([None, rng.randint(0, 2000)])
        found = anomaly(attempt, kind=kind, domain=domain, action=action, last_step=step,
                        category=rng.choice(["segfault", "nccl_error", "slurm_time_limit"]))
        decision = decide(history, found, policy, when)
        outcomes.append((found, decision, history))
        if decision.kind != "restart":
            break
        history = replace(
            history, last_generation=decision.generation, decided_attempts=history.decided_attempts | {attempt},
            attempts=history.attempts + (AttemptRecord(attempt, high_step=step),),
            restarts=history.restarts + (RestartRecord(attempt, decision.generation, decision.fault_class, when),))
    return policy, outcomes


@pytest.mark.parametrize("seed", range(300))
def test_budgets_are_never_exceeded_and_application_faults_never_restarted(seed):
    policy, outcomes = random_case(random.Random(seed))
    restarts = [d for _, d, _ in outcomes if d.kind == "restart"]
    assert len(restarts) + 1 <= policy.max_attempts or not restarts
    for klass in ("hardware", "infrastructure", "application", "resource", "scheduler", "unknown", "hang"):
        assert sum(d.fault_class == klass for d in restarts) <= policy.budgets.of(klass)
    for found, decision, _ in outcomes:
        if found.action == "stop" or (found.kind == "crash" and found.fault_domain == "application"
                                      and policy.budgets.application == 0):
            assert decision.kind != "restart"
        if decision.kind != "restart":
            assert decision.rule  # every stop names its rule
    generations = [d.generation for d in restarts]
    assert generations == list(range(1, len(generations) + 1))


def test_every_rule_and_policy_key_is_documented():
    """docs/policy.md lists every rule decide() can name and every key of a policy table."""
    import re
    from pathlib import Path

    from relaunch.decider.domain import policy as policy_module
    from relaunch.common.policies.policy_set import policy_keys

    source = Path(policy_module.__file__).read_text()
    rules = set(re.findall(r'Decision\(\s*"\w+", "(\w+)"', source)) | set(re.findall(r'stop\("(\w+)"', source))
    assert {"joins_open_advice", "already_decided", "within_budget", "class_budget"} <= rules
    docs = (Path(__file__).resolve().parents[2] / "docs" / "policy.md").read_text()
    for rule in rules:
        assert f"`{rule}`" in docs and rule in (policy_module.__doc__ or ""), rule
    for key in policy_keys():
        assert key.split(".")[-1] in docs, key
