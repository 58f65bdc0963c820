"""Lost-node detection (detector/domain/lost_nodes.py) and the DOWN it leads to (actuator draining.py)."""

from __future__ import annotations

import datetime as dt

from relaunch.actuator.domain.commands import drain_argv
from relaunch.actuator.domain.draining import plan_downs
from relaunch.actuator.domain.observing import NodeCondition
from relaunch.common.schemas import Advice
from relaunch.detector.domain.lost_nodes import Heard, Progress, anomaly, at_hang, verdict

NOW = 1_000_000.0
STEADY = Progress(at=NOW - 0.2, step=400, intervals=(0.2,) * 20)


def heard(**ago: float) -> dict[str, Heard]:
    return {node: Heard(NOW - seconds, 2.0) for node, seconds in ago.items()}


def test_nothing_is_said_while_every_node_is_heard():
    assert verdict(["node1", "node2"], heard(node1=1.0, node2=1.9), STEADY, NOW) is None


def test_a_heartbeat_a_little_late_is_not_silence():
    assert verdict(["node1", "node2"], heard(node1=1.0, node2=3.9), Progress(NOW - 3.0, 10, (0.2,)), NOW) is None


def test_a_job_saving_a_checkpoint_is_left_to_the_hang_watch():
    saving = Progress(NOW - 7.5, 118, (0.2,) * 10, saving=True)
    assert verdict(["node1", "node2"], heard(node1=0.5, node2=7.0), saving, NOW).kind == "probe_silent"


def test_a_silent_node_whose_job_stopped_is_lost_and_named():
    found = verdict(["node1", "node2"], heard(node1=0.5, node2=7.0), Progress(NOW - 7.5, 118, (0.2,) * 10), NOW)
    assert found is not None and found.kind == "lost"
    assert found.nodes == ("node2",)
    assert "node2: no gpu-probe heartbeat for 7.0 s" in found.reason and "step 118" in found.reason
    assert "node1 still report" in found.reason


def test_a_silent_probe_on_a_job_that_keeps_stepping_is_only_reported():
    found = verdict(["node1", "node2"], heard(node1=0.5, node2=30.0), STEADY, NOW)
    assert found is not None and found.kind == "probe_silent" and found.silent == ("node2",)
    assert "reported, not acted on" in found.reason


def test_a_job_without_progress_is_never_judged_by_silence_alone():
    found = verdict(["node1", "node2"], heard(node1=0.5, node2=30.0), Progress(None), NOW)
    assert found is not None and found.kind == "probe_silent"


def test_a_slow_job_must_be_overdue_by_its_own_pace():
    # 20 s per step: 8 s without one says nothing yet, 45 s does.
    slow = (20.0,) * 5
    assert verdict(["node1", "node2"], heard(node1=0.5, node2=8.0), Progress(NOW - 8.0, 3, slow), NOW).kind \
        == "probe_silent"
    found = verdict(["node1", "node2"], heard(node1=0.5, node2=45.0), Progress(NOW - 45.0, 3, slow), NOW)
    assert found.kind == "lost" and found.nodes == ("node2",)


def test_every_node_silent_at_once_blames_none():
    found = verdict(["node1", "node2"], heard(node1=9.0, node2=9.0), Progress(NOW - 9.5, 50, (0.2,)), NOW)
    assert found is not None and found.kind == "lost" and found.nodes == ()
    assert found.silent == ("node1", "node2") and "waits for nodes" in found.reason


def test_a_node_without_a_probe_is_unknown_not_silent():
    assert verdict(["node1", "node9"], heard(node1=0.5), Progress(NOW - 60, 5, (0.2,)), NOW) is None


def advice(refs: list[str], exclude: list[str]) -> Advice:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    return Advice(cluster="c", job_id="7", attempt=0, generation=1, operation="restart", exclude_nodes=exclude,
                  reason="r", evidence_refs=refs, issued_at=now, expires_at=now + dt.timedelta(hours=1))


LOST = "node:node2:0.80:lost: its gpu-probe fell silent while the job stopped (lost host: ...)"


def test_a_lost_node_the_job_still_holds_is_marked_down_once():
    conditions = {"node2": NodeCondition("node2", "mixed", "none")}
    downs = plan_downs(advice([LOST], ["node2"]), ("node1", "node2"), conditions)
    assert [(d.node, d.state) for d in downs] == [("node2", "DOWN")]
    assert drain_argv(downs[0].node, downs[0].reason, downs[0].state)[3] == "State=DOWN"
    # Already down (Slurm's own, with its not-responding star, or anyone's): left alone.
    assert plan_downs(advice([LOST], ["node2"]), ("node1", "node2"),
                      {"node2": NodeCondition("node2", "down*", "Not responding")}) == []


def test_only_lost_evidence_of_an_excluded_node_the_job_holds_marks_it_down():
    conditions = {"node2": NodeCondition("node2", "mixed", "none")}
    xid = "node:node2:0.90:gpu-probe: failed at 10:00:00: XID 79"
    assert plan_downs(advice([xid], ["node2"]), ("node1", "node2"), conditions) == []
    assert plan_downs(advice([LOST], []), ("node1", "node2"), conditions) == []
    assert plan_downs(advice([LOST], ["node2"]), ("node1", "node3"), conditions) == []


def test_no_advice_marks_more_than_two_nodes_down():
    refs = [LOST.replace("node2", n) for n in ("node2", "node3", "node4")]
    conditions = {n: NodeCondition(n, "mixed", "none") for n in ("node2", "node3", "node4")}
    downs = plan_downs(advice(refs, ["node2", "node3", "node4"]), ("node1", "node2", "node3", "node4"), conditions)
    assert [d.node for d in downs] == ["node2", "node3"]


def test_a_node_not_yet_overdue_but_not_heard_since_is_waited_for():
    # A rack cut: node2 went silent first, node1's last heartbeat came just before the cut too.
    assert verdict(["node1", "node2"], heard(node1=3.5, node2=4.5), Progress(NOW - 4.2, 9, (0.2,)), NOW) is None
    # node1 spoke after node2 went: node2 alone is lost.
    found = verdict(["node1", "node2"], heard(node1=1.0, node2=4.5), Progress(NOW - 4.2, 9, (0.2,)), NOW)
    assert found.kind == "lost" and found.nodes == ("node2",)


def test_a_heartbeat_sent_just_before_the_silent_nodes_due_time_proves_nothing():
    # A rack cut between two probes of different phase: node2's next heartbeat was due 2.5 s ago, node1's
    # last came 0.2 s before that. Both may have gone at the same instant: wait for node1 to speak or fall silent.
    assert verdict(["node1", "node2"], heard(node1=2.7, node2=4.5), Progress(NOW - 4.2, 9, (0.2,)), NOW) is None
    # Nor one a little after it: node2's heartbeat may have come late (a loaded host) and the cut taken both.
    assert verdict(["node1", "node2"], heard(node1=2.1, node2=4.5), Progress(NOW - 4.2, 9, (0.2,)), NOW) is None
    # Heard half an interval (and the jitter) after node2's due time: node1 outlived it.
    found = verdict(["node1", "node2"], heard(node1=1.0, node2=4.5), Progress(NOW - 4.2, 9, (0.2,)), NOW)
    assert found.kind == "lost" and found.nodes == ("node2",)


# -- at a hang (lost_nodes.at_hang): the step that outlived the heartbeat ------------------------------------------

def test_a_step_seen_after_the_heartbeat_was_due_exonerates_the_host_until_the_job_hangs():
    """Seen in the hosts tier under load: node2's last heartbeat 6.3 s before the sweep, the last step (read late)
    0.3 s before it; the verdict says "probe alone"; ten seconds later the job is hung and node2 still silent
    while node1 reports: node2 is the lost host."""
    last_step = Progress(NOW - 0.3, 9, (0.2,) * 8)
    assert verdict(["node1", "node2"], heard(node1=0.4, node2=6.3), last_step, NOW).kind == "probe_silent"
    later = NOW + 10.0
    hb = {"node1": Heard(later - 0.5, 2.0), "node2": Heard(NOW - 6.3, 2.0)}
    found = at_hang(["node1", "node2"], hb, last_step, later)
    assert found is not None and found.kind == "lost" and found.nodes == ("node2",)
    assert "silent since just before the job's last step" in found.reason and "node1 still report" in found.reason
    made = anomaly("c", "41", 0, found, hb, __import__("datetime").datetime.fromtimestamp(later, dt.UTC), 9,
                   "x; hang")
    assert made.category == "node_lost" and made.action == "restart_excluding" and made.nodes == ["node2"]
    assert made.summary == "x; hang" and made.evidence[0].path == "gpu-probe:node2"


def test_a_line_that_reached_the_log_seconds_late_still_names_the_lost_host_at_a_hang():
    """Seen in CI (three test stacks on two cores): the cut host's last heartbeat 7.6 s before the job's last step as
    its log shows it (the step was printed before the cut; slurmstepd and srun, starved of CPU, wrote it late)."""
    last_step = Progress(NOW - 11.0, 9, (0.2,) * 8)
    hb = {"node1": Heard(NOW - 0.5, 2.0), "node2": Heard(NOW - 11.0 - 7.6, 2.0)}
    found = at_hang(["node1", "node2"], hb, last_step, NOW)
    assert found is not None and found.nodes == ("node2",)
    # Silent 20 s before the last step: the job stepped on without it for longer than any output lag: a probe alone.
    hb["node2"] = Heard(NOW - 11.0 - 20.0, 2.0)
    assert at_hang(["node1", "node2"], hb, last_step, NOW) is None


def test_a_probe_silent_long_before_the_last_step_is_a_probe_alone_at_a_hang_too():
    """A probe that died minutes before a software hang: the job stepped on for minutes without it."""
    last_step = Progress(NOW - 30.0, 900, (0.2,) * 8)
    assert at_hang(["node1", "node2"], {"node1": Heard(NOW - 0.5, 2.0), "node2": Heard(NOW - 200.0, 2.0)},
                   last_step, NOW) is None


def test_a_hang_with_every_node_heard_or_every_node_silent_names_no_lost_host():
    last_step = Progress(NOW - 12.0, 50, (0.2,) * 8)
    assert at_hang(["node1", "node2"], heard(node1=0.5, node2=1.0), last_step, NOW) is None
    assert at_hang(["node1", "node2"], heard(node1=14.0, node2=14.5), last_step, NOW) is None
    assert at_hang(["node1", "node2"], heard(node1=0.5), Progress(None), NOW) is None


def test_a_node_heard_only_around_the_silent_ones_due_time_does_not_prove_it_outlived_them():
    last_step = Progress(NOW - 12.0, 50, (0.2,) * 8)
    # node2's heartbeat was due at NOW-12; node1 last heard at NOW-11.5: within the late share, proves nothing
    hb = {"node1": Heard(NOW - 11.5, 20.0), "node2": Heard(NOW - 14.0, 2.0)}
    assert at_hang(["node1", "node2"], hb, last_step, NOW) is None
