"""The decider's group commit (relaunch.decider.group_commit): callers that come together share a
batch, each gets its own outcome, a lone caller waits for nothing, and a failed batch fails only its
own callers. And the pure parts of a batch's node history (domain/reputation.py)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from relaunch.decider.domain import reputation
from relaunch.decider.group_commit import GroupCommit


async def test_callers_that_come_together_share_a_batch_and_each_gets_its_own_outcome():
    seen: list[list[int]] = []

    async def run(batch):
        seen.append([item for item, _ in batch])
        await asyncio.sleep(0.01)
        for item, future in batch:
            if item == 3:
                future.set_exception(ValueError("three"))
            else:
                future.set_result(item * 10)

    commit = GroupCommit(run, max_batch=4, max_inflight=1)
    outcomes = await asyncio.gather(*(commit.submit(i) for i in range(10)), return_exceptions=True)
    assert outcomes[:3] == [0, 10, 20] and isinstance(outcomes[3], ValueError) and outcomes[4:] == [40, 50, 60, 70,
                                                                                                    80, 90]
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert await commit.submit(7) == 70  # alone, later: a batch of one
    assert seen[-1] == [7]


async def test_a_batch_that_raises_or_forgets_an_item_fails_its_callers_only():
    async def run(batch):
        if batch[0][0] == "boom":
            raise RuntimeError("the batch failed")
        batch[0][1].set_result("first")  # the others left unsettled

    commit = GroupCommit(run, max_inflight=1)
    outcomes = await asyncio.gather(commit.submit("boom"), commit.submit("b"), return_exceptions=True)
    assert [str(o) for o in outcomes] == ["the batch failed", "the batch failed"]
    outcomes = await asyncio.gather(commit.submit("a"), commit.submit("b"), return_exceptions=True)
    assert outcomes[0] == "first" and "unsettled" in str(outcomes[1])


async def test_batches_run_side_by_side_up_to_max_inflight():
    running, most = 0, 0

    async def run(batch):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.02)
        running -= 1
        for item, future in batch:
            future.set_result(item)

    commit = GroupCommit(run, max_batch=1, max_inflight=2)
    assert await asyncio.gather(*(commit.submit(i) for i in range(6))) == list(range(6))
    assert most == 2


def test_an_exclusion_counts_in_history_unless_history_was_its_only_reason():
    assert reputation.counts_in_history("n1", ["gpu-probe: failed: XID 79"])
    assert reputation.counts_in_history("n1", [])
    assert reputation.counts_in_history("n1", ["excluded for 2 other jobs (1, 3)", "gpu-probe: failed"])
    assert not reputation.counts_in_history("n1", ["excluded for 2 other jobs (1, 3), weight 2.00"])


def test_a_batch_adds_its_earlier_exclusions_newest_first_before_what_was_read():
    t0, t1 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    read = {"n1": (("7", t0),), "n2": (("8", t0),)}
    merged = reputation.with_exclusions(read, {"n1": [("2", t1), ("1", t1)], "n3": [("1", t1)]})
    assert merged == {"n1": (("2", t1), ("1", t1), ("7", t0)), "n2": (("8", t0),), "n3": (("1", t1),)}
    assert reputation.with_exclusions(read, {}) is read
    # equal times: the decision taken last is named first, as one at a time (it would be the newest)
    assert reputation.history_weight(merged["n1"], t1)[1] == ("2", "1", "7")
    with pytest.raises(ValueError):
        reputation.history_weight(merged["n1"], t1, dt.timedelta(0))
