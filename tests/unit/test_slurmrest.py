"""The slurmrestd adapter's pure parts: which request each reconcile command becomes, which version is
picked, and what the answers of real slurmrestd 24.11 and 26.05 read as.

tests/fixtures/slurmrest/<release>/ was captured from the project's own stacks (`make up SLURM=<v>
SLURM_API=rest`): a job requeued in held state with an exclusion (job-requeue-held.json), its
accounting records (slurmdb-job.json), the nodes, an unknown job's error, and the paths of /openapi/v3.
The adapter itself runs against real slurmrestd in tests/e2e (the `slurm_api` parameter).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from relaunch.actuator.domain.commands import drain_argv, step_argv
from relaunch.actuator.domain.rest_calls import Api, pick_api, rest_call
from relaunch.actuator.domain.rest_values import (
    accounted_from_rest, error_text, first_job, node_conditions_from, observed_from_rest, output_paths_of,
    usable_nodes_from,
)
from relaunch.actuator.domain.observing import read_listing
from relaunch.common.errors import PermanentError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurmrest"
RELEASES = ("24.11", "26.05")


def load(release: str, name: str) -> dict:
    return json.loads((FIXTURES / release / f"{name}.json").read_text())


def api(release: str) -> Api:
    return pick_api(load(release, "openapi-paths"))


def test_the_newest_data_parser_is_picked_and_requeue_only_where_offered():
    old, new = api("24.11"), api("26.05")
    assert (old.slurm, old.slurmdb, old.has_requeue) == ("v0.0.42", "v0.0.42", False)
    assert (new.slurm, new.slurmdb, new.has_requeue) == ("v0.0.45", "v0.0.45", True)


def test_a_slurmrestd_offering_only_old_versions_is_refused_with_what_it_offers():
    with pytest.raises(PermanentError, match=r"offered: v0\.0\.38"):
        pick_api({"paths": {"/slurm/v0.0.38/jobs": {}}})
    assert pick_api({"paths": {"/slurm/v0.0.41/jobs/": {}}}).slurmdb is None


@pytest.mark.parametrize("release", RELEASES)
def test_every_reconcile_step_has_a_request_except_requeue_before_26_05(release):
    a = api(release)
    v = a.slurm
    calls = {step: rest_call(step_argv(step, "42", ("node1", "node3")), a, 1_800_000_000)
             for step in ("requeuehold", "release", "start_now", "exclude", "cancel")}
    assert calls["release"].method == "POST" and calls["release"].path == f"/slurm/{v}/job/42"
    assert calls["release"].body == {"hold": False}
    assert calls["start_now"].body == {"begin_time": {"set": True, "infinite": False, "number": 1_800_000_000}}
    assert calls["exclude"].body == {"excluded_nodes": ["node1", "node3"]}
    assert (calls["cancel"].method, calls["cancel"].path, calls["cancel"].body) == ("DELETE", f"/slurm/{v}/job/42",
                                                                                   None)
    drain = rest_call(drain_argv("node2", "relaunch: xid 79"), a, 0)
    assert drain.path == f"/slurm/{v}/node/node2" and drain.body == {"state": ["DRAIN"], "reason": "relaunch: xid 79"}
    down = rest_call(drain_argv("node3", "relaunch: lost", "DOWN"), a, 0)
    assert down.body == {"state": ["DOWN"], "reason": "relaunch: lost"}
    if release == "24.11":
        assert calls["requeuehold"] is None
    else:
        assert calls["requeuehold"].path == f"/slurm/{v}/jobs/requeue"
        assert calls["requeuehold"].body == {"jobs": ["42"], "flags": ["Hold"]}


def test_a_command_without_a_rest_form_is_a_bug_not_a_guess():
    a = api("26.05")
    with pytest.raises(PermanentError, match="no slurmrestd form"):
        rest_call(("scontrol", "update", "JobId=4", "TimeLimit=5"), a, 0)
    with pytest.raises(PermanentError, match="no slurmrestd form"):
        rest_call(("scontrol", "suspend", "4"), a, 0)
    with pytest.raises(PermanentError, match="refusing to pass"):
        rest_call(("scancel", "4;rm"), a, 0)


@pytest.mark.parametrize("release", RELEASES)
def test_a_requeue_held_job_reads_as_scontrol_shows_it(release):
    job = first_job(load(release, "job-requeue-held"))
    seen = observed_from_rest(job)
    assert (seen.state, seen.held, seen.restarts, seen.excluded) == ("PENDING", True, 1, ("node3",))
    assert seen.requeue_allowed and seen.partition == "debug" and seen.nodes == ()
    assert seen.eligible_at is not None and seen.submitted is not None and seen.ended is None
    # The listing of the same slurmrestd reads with squeue's parser (the job is not opted in).
    assert read_listing({"jobs": [job]}).listed == {str(job["job_id"])}


@pytest.mark.parametrize("release", RELEASES)
def test_output_paths_are_expanded_whichever_release_printed_a_pattern(release):
    job = first_job(load(release, "job-requeue-held"))
    stdout, stderr = output_paths_of(job)
    assert stdout.endswith(f"/jobs/wrap-{job['job_id']}.out") and stderr == stdout, (release, stdout)
    assert "%" in job["standard_output"] or release == "24.11"


@pytest.mark.parametrize("release", RELEASES)
def test_accounting_records_read_as_sacct_gives_them(release):
    records = accounted_from_rest(load(release, "slurmdb-job"))
    assert [r.restarts for r in records] == [0, 1]
    first = records[0]
    # 24.11 turns a requeued attempt's record into REQUEUED; 26.05 keeps FAILED (docs/slurm-versions.md).
    assert first.state == ("REQUEUED" if release == "24.11" else "FAILED")
    assert first.comment == "fixture" and first.nodes == ("node1",) or first.nodes
    assert first.stdout.endswith(f"/jobs/wrap-{first.job_id}.out")
    assert isinstance(first.submit, dt.datetime) and first.submit.tzinfo is not None


@pytest.mark.parametrize("release", RELEASES)
def test_nodes_and_partitions(release):
    nodes = load(release, "nodes")
    assert usable_nodes_from(nodes) == {"debug": 4}
    drained = json.loads(json.dumps(nodes))
    for node in drained["nodes"]:
        if node["name"] == "node2":
            node["state"], node["reason"] = ["IDLE", "DRAIN"], "relaunch: xid 79"
    assert usable_nodes_from(drained) == {"debug": 3}
    cond = node_conditions_from(drained, ["node2", "node4"])
    assert cond["node2"].draining and cond["node2"].reason == "relaunch: xid 79"
    assert not cond["node4"].draining


@pytest.mark.parametrize("release", RELEASES)
def test_an_unknown_job_says_so_in_slurms_words(release):
    assert "Invalid job id specified" in error_text(load(release, "job-missing"))


def test_the_adapter_is_chosen_by_setting_and_rest_says_what_it_lacks(monkeypatch, tmp_path):
    from relaunch.actuator.adapters.slurm import Slurm
    from relaunch.actuator.adapters.slurmrest import SlurmRest
    from relaunch.actuator.slurm_access import slurm_adapter
    from relaunch.common.settings import CommonSettings

    for key in [k for k in __import__("os").environ if k.startswith(("RELAUNCH_SLURMRESTD_", "RELAUNCH_SLURM_API"))]:
        monkeypatch.delenv(key)
    assert type(slurm_adapter(CommonSettings())) is Slurm  # cli is the default
    monkeypatch.setenv("RELAUNCH_SLURM_API", "rest")
    with pytest.raises(PermanentError, match="RELAUNCH_SLURMRESTD_URL is not set"):
        slurm_adapter(CommonSettings())
    monkeypatch.setenv("RELAUNCH_SLURMRESTD_URL", "https://slurm-restapi.slurm:6820")
    with pytest.raises(PermanentError, match="RELAUNCH_SLURMRESTD_TOKEN_FILE is not set"):
        slurm_adapter(CommonSettings())
    monkeypatch.setenv("RELAUNCH_SLURMRESTD_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("RELAUNCH_SLURMRESTD_CA_FILE", str(tmp_path / "missing-ca.crt"))
    with pytest.raises(PermanentError, match="not a readable PEM CA bundle"):
        slurm_adapter(CommonSettings())
    monkeypatch.setenv("RELAUNCH_SLURMRESTD_CLI_FALLBACK", "true")
    monkeypatch.delenv("RELAUNCH_SLURMRESTD_CA_FILE")
    rest = slurm_adapter(CommonSettings())
    assert isinstance(rest, SlurmRest) and isinstance(rest.cli, Slurm)
    monkeypatch.setenv("RELAUNCH_SLURMRESTD_TOKN_FILE", "x")
    with pytest.raises(ValueError, match="unknown setting"):
        slurm_adapter(CommonSettings())


def test_the_token_file_is_read_whole_with_or_without_scontrols_prefix(tmp_path):
    from relaunch.actuator.adapters.slurmrest import SlurmRest

    token = tmp_path / "token"
    token.write_text("SLURM_JWT=eyJabc.def.ghi\n")
    rest = SlurmRest("http://127.0.0.1:1", str(token))
    assert rest._read_token() == "eyJabc.def.ghi"
    token.write_text("eyJnew.token.here")
    import os
    os.utime(token, (1, 1))  # a new mtime: the file is read again
    assert rest._read_token() == "eyJnew.token.here"
