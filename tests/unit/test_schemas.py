import datetime as dt

import pytest
from pydantic import ValidationError

from relaunch.common.schemas import Advice, JobObserved, dump

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def _advice(**kw):
    base = dict(cluster="c1", job_id="42", attempt=0, generation=1, operation="restart", reason="r",
                issued_at=NOW, expires_at=NOW)
    return Advice(**{**base, **kw})


def test_wire_format_carries_the_schema_version_and_round_trips():
    advice = _advice(exclude_nodes=["node2"])
    wire = dump(advice)
    assert b'"schema":"relaunch.advice/v1"' in wire
    assert Advice.model_validate_json(wire) == advice


def test_unknown_fields_and_wrong_schema_are_rejected():
    wire = dump(_advice()).replace(b'"reason":"r"', b'"reason":"r","extra":1')
    with pytest.raises(ValidationError):
        Advice.model_validate_json(wire)
    with pytest.raises(ValidationError):
        Advice.model_validate_json(dump(_advice()).replace(b"advice/v1", b"advice/v9"))


@pytest.mark.parametrize("job_id", ["1; rm -rf /", "", "12 13", "../x", "-1"])
def test_job_ids_that_could_reach_a_command_are_validated(job_id):
    with pytest.raises(ValidationError):
        _advice(job_id=job_id)


@pytest.mark.parametrize("node", ["node1 node2", "n;id", "", "a" * 65, "node.1"])
def test_node_names_are_validated(node):
    with pytest.raises(ValidationError):
        _advice(exclude_nodes=[node])


def test_models_are_frozen():
    obs = JobObserved(cluster="c", job_id="1", state="RUNNING", restarts=0, observed_at=NOW)
    with pytest.raises(ValidationError):
        obs.state = "FAILED"
