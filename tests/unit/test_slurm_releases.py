"""What Slurm 22.05, 24.11 and 26.05 really print, read by one adapter.

The fixtures under tests/fixtures/slurm/<release>/ were captured from the project's own clusters of
each release by scripts/capture_slurm_fixtures.py (`make fixtures` captures them again); nothing in
them is written by hand. jobs.json says which job id is which scenario. show-job.json holds each job's
own `squeue --json --states=all --jobs=J` object (what the actuator's observe() reads). scontrol.json
holds the `-o` text relaunch no longer reads: the tests use it to check that the JSON says what Slurm
itself printed (the "crafted" job's name and comment shadow fields there: test_slurm_user_text.py).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from pathlib import Path

import pytest
from memorybus import memory_bus

from relaunch.actuator.domain.accounting import REQUEUE_LINK, available_fields, job_chain, parse_sacct
from relaunch.actuator.domain.node_facts import NodeFacts
from relaunch.actuator.domain.observing import output_paths_of, parse_scontrol_line, read_listing
from relaunch.actuator.domain.rest_values import observed_from_rest
from relaunch.actuator.domain.slurm_values import Unreadable, exit_code, job_state, number
from relaunch.actuator.observer import Observer
from relaunch.common.schemas import JobObserved

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
RELEASES = ("22.05", "24.11", "26.05")


class Capture:
    def __init__(self, release: str) -> None:
        self.dir = FIXTURES / release
        self.release = release
        self.ids: dict[str, str] = json.loads((self.dir / "jobs.json").read_text())
        self.names = {v: k for k, v in self.ids.items()}

    def json(self, name: str) -> dict:
        return json.loads((self.dir / name).read_text())

    def scontrol(self, scenario: str) -> dict[str, str]:
        """The `-o` text's fields (never of the crafted job, whose name and comment shadow some)."""
        assert scenario != "crafted"
        return parse_scontrol_line(json.loads((self.dir / "scontrol.json").read_text())[scenario])

    def shown(self, scenario: str) -> dict:
        """The job's own object in `squeue --json --states=all --jobs=J` (what Slurm.show_job returns)."""
        return copy.deepcopy(self.json("show-job.json")[scenario])

    @property
    def sacct_fields(self) -> tuple[str, ...]:
        return tuple((self.dir / "sacct.fields").read_text().strip().split(","))

    def sacct(self):
        return parse_sacct((self.dir / "sacct.txt").read_text(), self.sacct_fields, "\x1f")


@pytest.fixture(params=RELEASES)
def capture(request) -> Capture:
    return Capture(request.param)


def test_the_fixtures_come_from_the_release_they_are_filed_under(capture):
    assert f" {capture.release}." in (capture.dir / "version.txt").read_text()


def test_every_scenario_is_read_from_squeue_states_all(capture):
    listing = read_listing(capture.json("squeue-all.json"))
    assert listing.unreadable == ()
    jobs = {capture.names[j.job_id]: j for j in listing.jobs if j.job_id in capture.names}
    expected = {
        "ok": ("COMPLETED", 0, 0), "fail": ("FAILED", 1, 0), "sigkill": ("FAILED", 137, 0),
        "cancelled": ("CANCELLED", 143, 0), "running": ("RUNNING", None, 0), "held": ("PENDING", None, 1),
        "excluded": ("PENDING", None, 1), "released": ("PENDING", None, 1), "chain": ("FAILED", 3, 1),
        "badconstraints": ("PENDING", None, 1), "comment": ("COMPLETED", 0, 0),
    }
    if "crafted" in capture.ids:
        expected["crafted"] = ("COMPLETED", 0, 0)
    assert {name: (j.state, j.exit_code, j.restarts) for name, j in jobs.items()} == expected
    assert all((j.user_id, j.group_id, j.work_dir) == (0, 0, "/work/main") for j in jobs.values())
    assert all(j.submitted is not None and j.submitted.year >= 2026 for j in jobs.values())
    assert jobs["comment"].comment == "relaunch:max_attempts=2 owner=a|b;x"
    assert jobs["badconstraints"].nodes == () and jobs["running"].nodes == ("node1",)


def test_plain_squeue_json_lists_finished_jobs_on_22_05_only(capture):
    plain = {capture.names.get(j.job_id) for j in read_listing(capture.json("squeue.json")).jobs}
    if capture.release == "22.05":
        assert {"ok", "fail", "chain"} <= plain
    else:
        assert plain & {"ok", "fail", "chain", "sigkill", "cancelled"} == set()
        assert {"running", "held"} <= plain


def test_observe_reads_the_same_on_every_release(capture):
    held = observed_from_rest(capture.shown("held"))
    assert held.state == "PENDING" and held.held and held.restarts == 1
    excluded = observed_from_rest(capture.shown("excluded"))
    assert excluded.excluded == ("node1",) and excluded.held
    running = observed_from_rest(capture.shown("running"))
    assert running.state == "RUNNING" and not running.held and running.nodes == ("node1",)
    bad = observed_from_rest(capture.shown("badconstraints"))
    assert bad.required == ("node3", "node4") and bad.excluded == ("node4",) and bad.num_nodes == 2 and not bad.held
    assert observed_from_rest(capture.shown("fail")).exit_code == "1:0"
    assert observed_from_rest(capture.shown("sigkill")).exit_code == "0:9"
    stdout, stderr = output_paths_of(capture.shown("fail"))
    assert stdout.endswith(f"/fail-{capture.ids['fail']}.out") and stderr.endswith(f"/fail-{capture.ids['fail']}.err")


@pytest.mark.parametrize("scenario", ["ok", "fail", "sigkill", "running", "held", "excluded", "released", "chain",
                                      "cancelled", "badconstraints", "comment"])
def test_the_json_says_what_scontrol_printed(capture, scenario):
    """Each fact observe() reads, from the JSON, equals scontrol's own text for the same job (on jobs
    whose name and comment hold nothing that looks like a field)."""
    fields, observed = capture.scontrol(scenario), observed_from_rest(capture.shown(scenario))
    assert (observed.state, observed.reason, str(observed.restarts)) == (fields["JobState"], fields["Reason"],
                                                                         fields["Restarts"])
    assert observed.requeue_allowed is (fields["Requeue"] == "1") and observed.partition == fields["Partition"]
    if fields["JobState"] not in ("PENDING", "RUNNING"):
        assert observed.exit_code == fields["ExitCode"]
    # 26.05 prints an empty StdErr where stderr goes with stdout; relaunch names that file for both.
    assert output_paths_of(capture.shown(scenario)) == (fields["StdOut"], fields["StdErr"] or fields["StdOut"])


def test_sacct_fields_are_detected_not_pinned(capture):
    fields = capture.sacct_fields
    assert fields[-1] == "Comment"
    has_restarts = capture.release != "22.05"
    assert ("Restarts" in fields) is has_restarts and ("StdOut" in fields) is has_restarts


def test_the_helpformat_of_a_release_without_the_basics_is_refused():
    with pytest.raises(ValueError, match="lacks"):
        available_fields("JobID State")


def test_a_requeued_failure_and_its_successor_form_one_chain(capture):
    """26.05 keeps the first attempt FAILED with End at the failure, 8 s before the next Submit."""
    records = capture.sacct()
    chain = job_chain(records, capture.ids["chain"])
    assert [r.exit_code for r in chain] == [2, 3]
    first, second = chain
    gap = second.submit - first.end
    if capture.release == "26.05":
        assert first.state == "FAILED" and gap > REQUEUE_LINK  # the End link alone would split it
    else:
        assert first.state == "REQUEUED" and abs(gap) <= REQUEUE_LINK
    if capture.release != "22.05":
        assert [r.restarts for r in chain] == [0, 1]


def test_accounting_says_where_the_output_went(capture):
    """The log path of a job only accounting still knows: StdOut/StdErr where the release has them,
    the submit line's -o/-e on 22.05; expanded as scontrol expands it."""
    records = {(r.job_id, r.restarts): r for r in capture.sacct()}
    fail = next(r for (job, _), r in records.items() if job == capture.ids["fail"])
    scontrol = capture.scontrol("fail")
    assert (fail.stdout, fail.stderr) == (scontrol["StdOut"], scontrol["StdErr"])
    ok = next(r for (job, _), r in records.items() if job == capture.ids["ok"])
    assert ok.stdout == ok.stderr == capture.scontrol("ok")["StdOut"]


# --- a shape nobody sends today ----------------------------------------------------------------------


def edited(capture: Capture, scenario: str, **fields) -> dict:
    listing = copy.deepcopy(capture.json("squeue-all.json"))
    for entry in listing["jobs"]:
        if str(entry["job_id"]) == capture.ids[scenario]:
            entry.update(fields)
    return listing


def test_a_state_in_an_unknown_shape_leaves_that_job_unobserved_and_says_so():
    capture = Capture("26.05")
    listing = read_listing(edited(capture, "fail", job_state={"current": ["FAILED"], "flags": []}))
    names = {capture.names.get(j.job_id) for j in listing.jobs}
    assert "fail" not in names and {"ok", "chain", "running"} <= names
    assert capture.ids["fail"] in listing.listed  # still listed: not taken for a job that vanished
    (problem,) = listing.unreadable
    assert (problem.job_id, problem.field, problem.consequence) == (capture.ids["fail"], "job_state",
                                                                    "job not observed")


def test_an_exit_code_in_an_unknown_shape_is_left_out_not_guessed():
    capture = Capture("26.05")
    listing = read_listing(edited(capture, "fail", exit_code="1:0"))
    (job,) = [j for j in listing.jobs if j.job_id == capture.ids["fail"]]
    assert job.state == "FAILED" and job.exit_code is None
    assert [(p.field, p.consequence) for p in listing.unreadable] == [("exit_code", "left out")]


@pytest.mark.parametrize("value", [["RUNNING", "FAILED"], [], [1], {"a": 1}, 7, None])
def test_states_that_cannot_be_read(value):
    with pytest.raises(Unreadable):
        job_state(value)


@pytest.mark.parametrize("value, shown", [
    ("FAILED", "FAILED"), (["FAILED"], "FAILED"), (["PENDING", "REQUEUE_HOLD"], "REQUEUE_HOLD"),
    (["FAILED", "COMPLETING"], "COMPLETING"), (["RUNNING", "LAUNCH_FAILED"], "RUNNING"),
])
def test_states_with_flags_read_as_scontrol_prints_them(value, shown):
    assert job_state(value)[0] == shown


@pytest.mark.parametrize("value, n", [
    (5, 5), ({"set": True, "infinite": False, "number": 5}, 5), ({"set": False, "infinite": False, "number": 0}, None),
    ({"set": True, "infinite": True, "number": 0}, None),
])
def test_numbers_of_both_shapes(value, n):
    assert number(value, "x") == n


@pytest.mark.parametrize("value", ["5", True, {"number": 5}, {"set": "yes", "number": 5}, [5]])
def test_numbers_that_cannot_be_read(value):
    with pytest.raises(Unreadable):
        number(value, "x")


@pytest.mark.parametrize("value, code", [
    (256, 1), (9, 137), ({"status": ["ERROR"], "return_code": {"set": True, "infinite": False, "number": 1},
                          "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}}, 1),
    ({"status": ["SIGNALED"], "return_code": {"set": False, "infinite": False, "number": 0},
      "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"}}, 137),
    ({"status": ["SIGNALED"], "return_code": {"set": False, "infinite": False, "number": 0}}, None),
])
def test_exit_codes_of_both_shapes(value, code):
    assert exit_code(value) == code


# --- the observer never stops ------------------------------------------------------------------------


def observed_by(slurm, action, poll_s: float = 1.0) -> list[JobObserved]:
    """What an Observer over `slurm` publishes (through a bus in memory, tests/unit/memorybus.py) while
    `action(observer)` runs."""

    async def go():
        async with memory_bus("actuator") as (bus, streams):
            await action(Observer(bus, slurm, "c", poll_s), streams)
            return streams.of(JobObserved)

    return asyncio.run(go())


async def poll_once(observer, _streams) -> None:
    await observer.poll_once()


class CapturedSlurm:
    """The adapter's surface, answering from one release's fixtures; `listings` are returned in turn."""

    def __init__(self, capture: Capture, listings: list) -> None:
        self.capture, self.listings = capture, listings

    async def version(self) -> str:
        return (self.capture.dir / "version.txt").read_text().split()[-1]

    async def list_jobs(self) -> dict:
        item = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        if isinstance(item, Exception):
            raise item
        return item

    async def show_job(self, job_id: str):
        name = self.capture.names.get(job_id)
        return self.capture.shown(name) if name else None

    async def accounting(self, job_ids):
        return [r for r in self.capture.sacct() if r.job_id in job_ids]

    async def accounting_since(self, start):
        return self.capture.sacct()

    async def node_facts(self):
        return NodeFacts({"debug": 4}, {f"node{i}": f"10.0.0.{i}" for i in range(1, 5)}, frozenset({"node4"}))


@pytest.mark.parametrize("release", RELEASES)
def test_the_observer_publishes_every_opted_in_job_with_its_log_path(release):
    capture = Capture(release)
    published = observed_by(CapturedSlurm(capture, [capture.json("squeue-all.json")]), poll_once)
    seen = {capture.names.get(o.job_id): o for o in published}
    assert seen["fail"].state == "FAILED" and seen["fail"].exit_code == 1
    assert seen["fail"].stderr.endswith(f"fail-{capture.ids['fail']}.err")
    assert seen["chain"].restarts == 1 and seen["chain"].submit_time is not None
    # Each node's NodeAddr and Slurm's down nodes, for the job's own nodes only (node_facts.py).
    for observed in published:
        assert observed.node_addrs == {n: f"10.0.0.{n[4:]}" for n in observed.nodes}, observed
        assert observed.nodes_down == [n for n in observed.nodes if n == "node4"]
    assert any(o.node_addrs for o in published)


def test_a_job_found_only_by_the_accounting_sweep_carries_its_log_path():
    """The observer starts after the jobs ended and slurmctld forgot them (MinJobAge): accounting
    alone knows them, and it says where their output went."""
    for release in RELEASES:
        capture = Capture(release)
        published = observed_by(CapturedSlurm(capture, [{"jobs": []}]), poll_once)
        seen = {capture.names.get(o.job_id): o for o in published}
        assert seen["fail"].state == "FAILED", release
        assert seen["fail"].stdout.endswith(f"fail-{capture.ids['fail']}.out"), release
        assert seen["fail"].stderr.endswith(f"fail-{capture.ids['fail']}.err"), release
        assert seen["chain"].restarts == 1 and seen["chain"].exit_code == 3, release


def test_the_observer_loop_survives_an_unexpected_error_and_an_unknown_shape():
    capture = Capture("24.11")
    weird = edited(capture, "fail", job_state={"current": ["FAILED"]})
    listings = [RuntimeError("boom"), {"jobs": "not a list"}, weird, capture.json("squeue-all.json")]

    versions = []

    async def run_until_fail_is_seen(observer, streams):
        stop = asyncio.Event()
        task = asyncio.create_task(observer.run(stop))
        for _ in range(400):
            if any(capture.names.get(o.job_id) == "fail" for o in streams.of(JobObserved)):
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task
        versions.append(observer.slurm_version)

    published = observed_by(CapturedSlurm(capture, listings), run_until_fail_is_seen, poll_s=0.01)
    names = [capture.names.get(o.job_id) for o in published]
    assert "running" in names and "fail" in names  # read once the listing could be read again
    assert versions == ["24.11.5"]


def test_first_attempt_submit_time_survives_the_26_05_chain():
    capture = Capture("26.05")
    chain = job_chain(capture.sacct(), capture.ids["chain"])
    listing = read_listing(capture.json("squeue-all.json"))
    (job,) = [j for j in listing.jobs if j.job_id == capture.ids["chain"]]
    assert abs(chain[-1].submit - job.submitted) <= dt.timedelta(seconds=1)
    assert chain[0].restarts == 0
