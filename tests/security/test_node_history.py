"""Attack: poisoning a node's history (issue 35, item 3). Two jobs of one unprivileged user (nobody), pinned to
node2, print a fake `NVRM: Xid (...): 79, ..., GPU has fallen off the bus.` line and fail: each is restarted
without node2, and two exclusions for other jobs within a day used to make node2 a suspect for every job
(docs/policy.md, "node history across jobs"). Then root's next failing job on node2 (a plain segfault) is
decided. Beside it, a job of nobody on node1 prints an XID line that names node3 (a syslog host prefix).

Proves the threat model's line "a user who submits jobs ... may never cause: excluding a node for other users
by what their jobs print" and "Node evidence from text is a hint" (docs/security.md, "Threat model"): root's
job is restarted without node2 excluded on history, and the line naming node3 excludes neither node1 nor
node3 on that line alone."""

from __future__ import annotations

import time
import uuid

import pytest
from attacks import NOBODY, forget, nobody_dir, submit, wait_ledger

pytestmark = [pytest.mark.e2e, pytest.mark.one_release(seconds=11)]

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
POLICY = "relaunch:max_attempts=2"


def decided(record: dict) -> bool:
    return bool(record.get("advice")) or record["job"]["verdict"] == "stopped"


def history_reasons(advice: dict, node: str) -> list[str]:
    suspects = (advice.get("evidence") or {}).get("suspects") or []
    return [r for s in suspects if s["node"] == node for r in s["reasons"] if "history" in r.lower()]


def test_one_user_s_fake_xid_lines_do_not_exclude_a_node_for_others(services):
    env, tag = services, uuid.uuid4().hex[:8]
    forget(env, "node1", "node2", "node3")
    home = nobody_dir(env, tag)
    started = time.monotonic()
    try:
        poison = [submit(env, "flaky-train.sh", POLICY, "-w", "node2", user=NOBODY, workdir=home, STEP_SECONDS="0.2",
                         CRASH_LINE=XID) for _ in range(2)]
        named = submit(env, "flaky-train.sh", POLICY, "-w", "node1", user=NOBODY, workdir=home, STEP_SECONDS="0.2",
                       CRASH_LINE=f"Dec  4 21:00:00 node3 kernel: {XID}")
        for job in poison:  # their own restarts may leave node2 out: that is theirs to cause
            wait_ledger(env, job, "the fake XID decided", decided)

        victim = submit(env, "flaky-train.sh", POLICY, "-w", "node2", STEP_SECONDS="0.2")
        record = wait_ledger(env, victim, "root's segfault decided", lambda r: bool(r.get("advice")))
        (advice,) = record["advice"]
        assert advice["operation"] == "restart", advice
        assert "node2" not in advice["exclude_nodes"], (advice["exclude_nodes"], advice["reason"])
        assert "history" not in advice["reason"].lower() and not history_reasons(advice, "node2"), advice

        record = wait_ledger(env, named, "the XID line naming node3 decided", decided)
        for advice in record["advice"]:
            assert not {"node1", "node3"} & set(advice["exclude_nodes"]), (advice["exclude_nodes"], advice["reason"])
        print(f"node history: not poisoned, in {time.monotonic() - started:.0f} s")
    finally:
        forget(env, "node1", "node2", "node3")
