"""One user cannot get a healthy node excluded for everyone, against a real Postgres ledger (issue 35,
item 3; docs/policy.md "Node history"): the job's owner is kept from JobObserved.user_id (migration 0012),
the node-history read says whose each exclusion was and whether gpu-probe or Slurm stood behind it, and
the decider counts users, not jobs."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from relaunch.common.outcomes import Delivery
from relaunch.common.clock import utcnow as now
from relaunch.common.schemas import AnomalyDetected, EvidenceLine, JobObserved, NodeHealth
from relaunch.decider.handlers import Decider
from relaunch.decider.outbox import OutboxPublisher

pytestmark = pytest.mark.integration
DELIVERY = Delivery("s", 1, 1)
NOBODY, ROOT, ALICE = 65534, 0, 1001
FAKE_XID = "Dec  4 11:59:30 {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus"


def observed(cluster, job, nodes, user_id, state="RUNNING"):
    return JobObserved(cluster=cluster, job_id=job, name="train", state=state, restarts=0, nodes=list(nodes),
                       comment="relaunch:max_attempts=4", partition="gpu", observed_at=now(), user_id=user_id)


def xid(cluster, job, host, nodes, at=None):
    """The detector's anomaly for an XID 79 line naming `host` (the culprits among the job's nodes, else all)."""
    return AnomalyDetected(
        anomaly_id=f"{cluster}.{job}.0.crash", cluster=cluster, job_id=job, attempt=0, kind="crash", source="log",
        signature_id="gpu_xid", category="gpu_xid_hardware", fault_domain="hardware", action="restart_excluding",
        summary="the GPU reported a hardware fault", nodes=[host] if host in nodes else list(nodes),
        evidence=[EvidenceLine(path="/o", offset=0, text=FAKE_XID.format(host=host))], detected_at=at or now())


def segfault(cluster, job, nodes):
    return AnomalyDetected(
        anomaly_id=f"{cluster}.{job}.0.crash", cluster=cluster, job_id=job, attempt=0, kind="crash", source="log",
        signature_id="segfault", category="segfault", fault_domain="unknown", action="restart",
        summary="segfault", nodes=list(nodes), detected_at=now())


async def fail(decider, anomaly, nodes, user_id):
    await decider.on_job(observed(anomaly.cluster, anomaly.job_id, nodes, user_id), DELIVERY)
    await decider.on_anomaly(anomaly, DELIVERY)


async def excluded(ledger, cluster, job):
    row = await ledger.pool.fetchrow("SELECT exclude_nodes, evidence_refs FROM advice WHERE cluster=$1 AND job_id=$2",
                                     cluster, job)
    return row["exclude_nodes"], row["evidence_refs"]


async def test_one_users_fake_xid_lines_do_not_exclude_node2_for_another_user_two_users_do(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    for job in ("11", "12"):
        await fail(decider, xid(cluster, job, "node2", ["node1", "node2"]), ["node1", "node2"], NOBODY)
        assert (await excluded(ledger, cluster, job))[0] == ["node2"]  # its own restart: its own word
    assert await ledger.pool.fetchval("SELECT user_id FROM jobs WHERE cluster=$1 AND job_id='11'", cluster) == NOBODY
    async with ledger.job_tx(cluster, "13") as tx:
        history = await tx.node_history(["node2"], now() - dt.timedelta(hours=1))
    assert sorted((e.job, e.owner, e.corroborated) for e in history["node2"]) == [
        ("11", NOBODY, False), ("12", NOBODY, False)]
    await fail(decider, segfault(cluster, "13", ["node2", "node3"]), ["node2", "node3"], ROOT)
    assert (await excluded(ledger, cluster, "13"))[0] == []

    # A second, different user's job with the same line on node2, decided in the same batch as root's
    # next failure on node2 (or just before it): now two users stand behind it.
    await decider.on_job(observed(cluster, "14", ["node2", "node4"], ALICE), DELIVERY)
    await decider.on_job(observed(cluster, "15", ["node2", "node3"], ROOT), DELIVERY)
    await asyncio.gather(decider.on_anomaly(xid(cluster, "14", "node2", ["node2", "node4"]), DELIVERY),
                         decider.on_anomaly(segfault(cluster, "15", ["node2", "node3"]), DELIVERY))
    nodes, refs = await excluded(ledger, cluster, "15")
    assert nodes == ["node2"] and "2 different known user(s)" in refs, refs


async def test_a_line_naming_a_node_the_job_did_not_run_on_is_only_a_hint(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await fail(decider, xid(cluster, "21", "node3", ["node1"]), ["node1"], ALICE)
    nodes, refs = await excluded(ledger, cluster, "21")
    assert nodes == [] and "node:node3:0.00:a hint" in refs, refs
    row = await ledger.pool.fetchrow("SELECT confidence, excluded FROM suspects WHERE cluster=$1 AND node='node3'",
                                     cluster)
    assert (row["confidence"], row["excluded"]) == (0.0, False)


async def test_an_unknown_owner_is_not_an_independent_user(ledger, unique):
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    for job, user in (("31", None), ("32", None), ("33", ALICE)):
        await fail(decider, xid(cluster, job, "node2", ["node1", "node2"]), ["node1", "node2"], user)
    await fail(decider, segfault(cluster, "34", ["node2", "node3"]), ["node2", "node3"], ROOT)
    nodes, refs = await excluded(ledger, cluster, "34")
    assert nodes == [] and "one user's word is not enough" in refs, refs


async def test_a_gpu_probe_reading_corroborates_one_users_failures(ledger, unique):
    """nobody's two jobs failed while gpu-probe read node2 as failed (an hour ago, outside root's window):
    their exclusions are corroborated, so they count for root's job as well."""
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    hour_ago = now() - dt.timedelta(hours=1)
    await decider.on_node(NodeHealth(cluster=cluster, node="node2", verdict="failed", backend="fake", at=hour_ago,
                                     reasons=["GPU 3: XID 79 (GPU has fallen off the bus)"]), DELIVERY)
    for job in ("41", "42"):
        await fail(decider, xid(cluster, job, "node2", ["node1", "node2"], at=hour_ago), ["node1", "node2"], NOBODY)
        nodes, refs = await excluded(ledger, cluster, job)
        assert nodes == ["node2"] and "gpu-probe: failed" in refs
    await fail(decider, segfault(cluster, "43", ["node2", "node3"]), ["node2", "node3"], ROOT)
    nodes, refs = await excluded(ledger, cluster, "43")
    assert nodes == ["node2"] and "2 corroborated by gpu-probe or Slurm" in refs and "gpu-probe: failed" not in refs


async def test_an_observation_without_the_owner_keeps_the_known_one(ledger, unique):
    """An actuator of an older release sends no user_id, and a decider of the release before calls the
    20-argument observe_job (migration 0012 keeps it): neither forgets an owner already known."""
    cluster = f"c{unique}"
    decider = Decider(ledger, OutboxPublisher(None, ledger))
    await decider.on_job(observed(cluster, "51", ["node1"], ALICE), DELIVERY)
    await decider.on_job(observed(cluster, "51", ["node1"], None), DELIVERY)
    assert await ledger.pool.fetchval(
        "SELECT observe_job($1, '51', 0, 'RUNNING', '{node1}', NULL, NULL, 'train', 'relaunch:max_attempts=4', "
        "'gpu', '{}', '[]', 'act', '', 'default', '{}', NULL, now(), NULL, 1.0)", cluster)
    assert await ledger.pool.fetchval("SELECT user_id FROM jobs WHERE cluster=$1 AND job_id='51'", cluster) == ALICE
    await decider.on_job(observed(cluster, "52", ["node1"], None), DELIVERY)
    assert await ledger.pool.fetchval("SELECT user_id FROM jobs WHERE cluster=$1 AND job_id='52'", cluster) is None
