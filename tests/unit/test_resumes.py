"""Whether a restarted attempt resumed from the checkpoint its Advice expected (decider domain/resumes.py)."""

import datetime as dt

from relaunch.common.schemas import CheckpointFact
from relaunch.decider.domain.resumes import resumed

AT = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)


def fact(kind, step, attempt=1):
    return CheckpointFact(cluster="c", job_id="1", attempt=attempt, kind=kind, step=step, at=AT)


def test_a_first_step_at_or_past_the_checkpoint_resumed_from_it():
    assert resumed(fact("first_step", 1010), 1000)["as_expected"] is True
    late = resumed(fact("first_step", 10), 1000)
    assert late["as_expected"] is False and "not the checkpoint expected (step 1000" in late["reason"]


def test_a_load_line_must_name_the_checkpoint_itself():
    assert resumed(fact("loaded", 1000), 1000)["as_expected"] is True
    assert resumed(fact("loaded", 500), 1000)["as_expected"] is False


def test_other_facts_say_nothing_of_where_it_began():
    assert resumed(fact("saved", 1000), 1000) is None
    assert resumed(fact("loaded", None), 1000) is None
