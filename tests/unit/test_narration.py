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


def test_an_audit_entry_is_narrated_in_words_not_json():
    from relaunch.client.narration import audit_words, describe
    from relaunch.common.schemas import AuditEntry

    detail = '{"attempt": 0, "rule": "within_budget", "reason": "segfault: restarting (attempt 2 of 3)"}'
    entry = AuditEntry(cluster="c", job_id="7", service="decider", action="restart", detail=detail,
                       idempotency_key="k", at="2026-12-01T08:00:00Z")
    line = describe(entry, {})
    assert line == "decider    restart: segfault: restarting (attempt 2 of 3)" and "{" not in line
    assert audit_words('{"errors": ["unknown option \'x\'"], "mode": "observe"}') == "errors unknown option 'x', mode observe"
    assert audit_words("plain text") == "plain text"
