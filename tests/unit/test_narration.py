from relaunch.client.narration import recovery_seconds


def test_recovery_seconds_from_the_jobs_own_timestamps():
    log = ("[train] attempt 0 on node1 started_at=100.0: loading\n[train] crashing at=110.5\n"
           "Segmentation fault (core dumped)\n[train] attempt 1 on node1 started_at=112.0: loading\n")
    assert recovery_seconds(log) == 1.5
    assert recovery_seconds("[train] crashing at=1.0\n") is None


def test_recovery_seconds_skips_an_attempt_slurm_refused_to_launch():
    # Attempt 1 was killed at launch (its credential revoked) and printed nothing; attempt 2 ran.
    log = ("[train] attempt 0 on node1 started_at=1.0: loading\n[train] crashing at=2.0\n"
           "[train] attempt 2 on node1 started_at=4.25: loading\n")
    assert recovery_seconds(log) == 2.25
