"""A job whose log names the peer that failed by its address: the detector, told each node's NodeAddr by the
observer (JobObserved.node_addrs), names that peer's node, and the decider leaves it out of the restart, never
the node that printed the line. A node failure that Slurm's survivors report names the node Slurm shows down
(JobObserved.nodes_down), never the survivor (issue 36, item 6)."""

from __future__ import annotations

import datetime as dt

from test_one_verdict import T0, HotStateInMemory, Published

from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.common.schemas import AnomalyDetected, JobObserved, LogBatch
from relaunch.decider.domain.attribution import attribute
from relaunch.detector.domain import hangs, stragglers
from relaunch.detector.domain.detection import crash_from_scheduler
from relaunch.detector.handlers import Detector
from relaunch.detector.tracking import ProgressTracker

IB = ("node3:2229:2266 [0] transport/net_ib.cc:2034 NCCL WARN NET/IB : Got completion from peer 10.0.0.4<43210> "
      "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.3 remoteGids::ffff:10.0.0.4")
NODE_FAILURE = ("slurmstepd-node3: error: *** STEP 2.0 ON node3 CANCELLED AT 2026-12-04T10:00:05 DUE TO NODE "
                "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")


class _State(HotStateInMemory):
    """What Detector._on_job asks of HotState besides (adapters/hotstate.py)."""

    async def job_unless_anomaly(self, cluster, job_id, attempt):
        return await self.job(cluster, job_id), await self.has_anomaly(cluster, job_id, attempt)

    async def candidate(self, cluster, job_id, attempt):
        return self.candidates.get((cluster, job_id, attempt))

    async def untrack(self, cluster, job_id):
        pass


class _Follower:
    log_roots = ()

    def refresh(self, job_id):
        pass

    async def read_job(self, job_id):
        pass


def observed(**fields) -> JobObserved:
    base = dict(cluster="c", job_id="2", state="RUNNING", restarts=0, nodes=["node3", "node4"],
                comment="relaunch:max_attempts=3", observed_at=T0, user_id=1000, group_id=1000)
    return JobObserved(**{**base, **fields})


async def detected(line: str, obs: JobObserved) -> AnomalyDetected:
    state = _State()
    published = Published(state)
    tracker = ProgressTracker(None, state, "c", hangs.HangPolicy(), stragglers.StragglerPolicy(), anomalies=published)
    detector = Detector(None, state, _Follower(), builtin_catalogue(), grace_s=0, tracker=tracker, anomalies=published)
    await detector.on_job(obs, None)
    await detector.on_log(LogBatch(cluster="c", job_id="2", attempt=0, path="/jobs/2.out", offset=0, lines=[line],
                                   read_at=T0 + dt.timedelta(seconds=5)), None)
    (anomaly,) = published.anomalies
    return anomaly


def excluded(anomaly: AnomalyDetected) -> list[str]:
    return [s.node for s in attribute(anomaly, ["node3", "node4"], [], T0 + dt.timedelta(seconds=6)) if s.excluded]


async def test_the_peer_an_nccl_line_names_by_address_is_left_out_not_the_node_that_printed_it():
    anomaly = await detected(IB, observed(node_addrs={"node3": "10.0.0.3", "node4": "10.0.0.4"}))
    assert anomaly.nodes == ["node4"]
    assert excluded(anomaly) == ["node4"]


async def test_without_node_addrs_an_address_names_no_node_and_nothing_is_left_out():
    anomaly = await detected(IB, observed())
    assert anomaly.nodes == ["node3", "node4"]
    assert excluded(anomaly) == []


async def test_a_shared_node_addr_names_no_node():
    anomaly = await detected(IB, observed(node_addrs={"node3": "127.0.0.1", "node4": "127.0.0.1"}))
    assert excluded(anomaly) == []


async def test_a_node_failure_blames_the_node_slurm_shows_down_never_the_survivor_that_printed_it():
    anomaly = await detected(NODE_FAILURE, observed(nodes_down=["node4"]))
    assert anomaly.category == "slurm_node_failure" and anomaly.nodes == ["node4"]
    assert "Slurm shows node4 down" in anomaly.summary
    suspects = attribute(anomaly, ["node3", "node4"], [], T0 + dt.timedelta(seconds=6))
    assert [s.node for s in suspects if s.excluded] == ["node4"]
    assert all(r.startswith("Slurm: ") for s in suspects for r in s.reasons)  # Slurm's word, corroborating
    # Slurm not (yet) saying which node is down: none is blamed, node3 least of all.
    anomaly = await detected(NODE_FAILURE, observed())
    assert excluded(anomaly) == []
    # The node the line names survived, whatever else says it is down (a survivor is never blamed for it).
    assert excluded(await detected(NODE_FAILURE, observed(nodes_down=["node3"]))) == []
    # Every node down: nothing says which failed.
    assert excluded(await detected(NODE_FAILURE, observed(nodes_down=["node3", "node4"]))) == []


def test_the_schedulers_node_fail_names_the_down_node():
    anomaly = crash_from_scheduler(observed(state="NODE_FAIL", nodes_down=["node4"], exit_code=0), T0)
    assert anomaly.nodes == ["node4"] and "Slurm shows node4 down" in anomaly.summary
    assert excluded(anomaly) == ["node4"]
    anomaly = crash_from_scheduler(observed(state="NODE_FAIL", exit_code=0), T0)
    assert anomaly.nodes == ["node3", "node4"] and excluded(anomaly) == []


async def test_a_crash_read_before_the_jobs_nodes_are_known_waits_for_their_node_addrs():
    """The line comes in the attempt's first second, before the observation that names the job's nodes:
    the crash is held, then published with the peer's node once that observation comes."""
    state = _State()
    published = Published(state)
    tracker = ProgressTracker(None, state, "c", hangs.HangPolicy(), stragglers.StragglerPolicy(), anomalies=published)
    detector = Detector(None, state, _Follower(), builtin_catalogue(), grace_s=0, tracker=tracker, anomalies=published)
    await detector.on_job(observed(state="PENDING", nodes=[]), None)
    await detector.on_log(LogBatch(cluster="c", job_id="2", attempt=0, path="/jobs/2.out", offset=0, lines=[IB],
                                   read_at=T0 + dt.timedelta(seconds=5)), None)
    assert published.anomalies == []
    await detector.on_job(observed(node_addrs={"node3": "10.0.0.3", "node4": "10.0.0.4"},
                                   observed_at=T0 + dt.timedelta(seconds=6)), None)
    (anomaly,) = published.anomalies
    assert anomaly.nodes == ["node4"] and anomaly.category == "nccl_network_error"
    assert excluded(anomaly) == ["node4"]
    await detector.on_job(observed(state="FAILED", exit_code=1, observed_at=T0 + dt.timedelta(seconds=7)), None)
    assert len(published.anomalies) == 1  # the held crash explained the failure: no scheduler fallback
