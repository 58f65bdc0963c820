"""Text a user chooses (a job's name, its comment) is read as that text and nothing else (issue 35).

`scontrol show job -o` prints a job's name right after JobId and its comment before StdOut, unquoted:
a job named "x Requeue=0" read as --no-requeue, "x Restarts=zz" as an unreadable restart counter, a
comment "StdOut=/etc/shadow" as where the job's output went. relaunch reads Slurm's JSON instead, where
each is one string value. These jobs are each release's own objects (tests/fixtures/slurm/<release>/
show-job.json, whose "crafted" job was submitted as `sbatch --job-name='x Requeue=0 Restarts=zz'
--comment='relaunch StdOut=/etc/shadow'`) with the name and comment set as Slurm stores them.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace

import pytest
from test_slurm_releases import RELEASES, Capture, CapturedSlurm, observed_by, poll_once

from relaunch.actuator.adapters.slurm import Slurm
from relaunch.actuator.adapters.slurmrest import with_ids
from relaunch.actuator.domain.accounting import parse_sacct
from relaunch.actuator.domain.observing import output_paths_of, read_listing
from relaunch.actuator.domain.rest_values import accounted_from_rest, observed_from_rest
from relaunch.common.errors import TemporaryError
from relaunch.common.schemas import JobObserved

NAMES = ["x Requeue=0", "x Restarts=zz", "a StdOut=/root/x", "x Requeue=0 Restarts=zz", "x\nRequeue=0 Restarts=zz",
         "x\x1b[31m Requeue=0\t StdErr=/root/y", "x ExcNodeList=node1 JobState=CANCELLED"]
COMMENTS = ["relaunch StdOut=/etc/shadow", "relaunch StdOut=/etc/shadow  StdErr=/etc/shadow Requeue=0",
            "relaunch\nStdOut=/etc/shadow\x1b]0;x\x07"]


def crafted(release: str, name: str, comment: str) -> tuple[dict, str]:
    """A finished job of `release` with this name and comment, as that release's squeue --json shows
    it, and the file Slurm writes its output to (the submitted pattern: <dir>/%x-%j.out)."""
    capture = Capture(release)
    job = capture.shown("crafted")
    folder = os.path.dirname(job["standard_output"])
    path = f"{folder}/{name}-{job['job_id']}.out"
    job.update(name=name, comment=comment)
    if "%" not in job["standard_output"]:  # 24.11 prints it expanded, with the name in it
        job.update(standard_output=path, standard_error=path)
    return job, path


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("comment", COMMENTS)
def test_a_name_or_comment_is_read_as_text_on_every_release(release, name, comment):
    job, path = crafted(release, name, comment)
    observed = observed_from_rest(job)
    assert observed.requeue_allowed and observed.restarts == 0 and observed.state == "COMPLETED"
    assert observed.excluded == () and observed.exit_code == "0:0"
    assert output_paths_of(job) == (path, path)
    listing = read_listing({"jobs": [job]})
    assert listing.unreadable == ()
    (seen,) = listing.jobs
    assert (seen.name, seen.comment, seen.restarts, seen.state) == (name, comment, 0, "COMPLETED")
    assert (seen.stdout, seen.stderr) == (path, path)
    assert "/etc/shadow" not in seen.stdout + seen.stderr and not seen.stdout.startswith("/root")


@pytest.mark.parametrize("release", RELEASES)
def test_the_crafted_job_as_slurm_printed_it(release):
    """Captured from a real cluster of each release: the -o text shadows Requeue, Restarts and StdOut
    (a reader taking the first `Key=` read Requeue=0, Restarts=zz, StdOut=/etc/shadow); the JSON does not."""
    capture = Capture(release)
    text = json.loads((capture.dir / "scontrol.json").read_text())["crafted"]
    assert "JobName=x Requeue=0 Restarts=zz " in text and "Comment=relaunch StdOut=/etc/shadow " in text
    job = capture.shown("crafted")
    observed = observed_from_rest(job)
    assert observed.requeue_allowed and observed.restarts == 0
    stdout, _ = output_paths_of(job)
    assert stdout.endswith(f"/x Requeue=0 Restarts=zz-{capture.ids['crafted']}.out")
    assert f" StdOut={stdout}" in text  # where Slurm itself says the output went


class JsonSlurm(Slurm):
    """The CLI adapter with Slurm's answers given: `squeue --json` prints `listing`."""

    def __init__(self, listing: dict) -> None:
        super().__init__()
        self.listing, self.argvs = listing, []

    async def _run(self, argv: list[str]) -> str:
        self.argvs.append(argv)
        return json.dumps(self.listing)


async def test_observe_reads_the_job_by_id_from_squeue_json_whatever_its_name():
    """22.05's squeue --json ignores --jobs: the job is picked by id, never by position."""
    job, path = crafted("22.05", "x Requeue=0 Restarts=zz", "relaunch StdOut=/etc/shadow")
    other = {**Capture("22.05").shown("held"), "name": f"y JobId={job['job_id']}"}
    slurm = JsonSlurm({"jobs": [other, job]})
    observed = await slurm.observe(str(job["job_id"]))
    assert observed.exists and observed.requeue_allowed and observed.restarts == 0 and observed.state == "COMPLETED"
    assert slurm.argvs[0] == ["squeue", "--json", "--states=all", f"--jobs={job['job_id']}"]
    assert output_paths_of(await slurm.show_job(str(job["job_id"]))) == (path, path)
    assert not (await slurm.observe("999999")).exists


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("field, value", [("restart_cnt", "zz"), ("job_state", {"current": "?"}),
                                          ("exit_code", "1:0"), ("nodes", "node[1-"), ("priority", "0")])
async def test_a_field_that_does_not_parse_stops_action_and_is_logged_once(release, field, value, caplog):
    job, _ = crafted(release, "x", "relaunch")
    job[field] = value
    slurm = JsonSlurm({"jobs": [job]})
    with caplog.at_level(logging.WARNING, logger="relaunch.actuator.adapters.slurm"):
        for _ in range(3):
            with pytest.raises(TemporaryError, match=field):
                await slurm.observe(str(job["job_id"]))
    assert len([r for r in caplog.records if field in r.getMessage()]) == 1


async def test_output_that_is_not_json_is_temporary():
    class Garbled(Slurm):
        async def _run(self, argv):
            return "JobId=1 JobName=x Requeue=0"

    with pytest.raises(TemporaryError, match="squeue"):
        await Garbled().observe("1")


# --- whose job it is -----------------------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_the_observer_says_whose_job_it_is(release):
    capture = Capture(release)
    listing = capture.json("squeue-all.json")
    for entry in listing["jobs"]:
        if str(entry["job_id"]) == capture.ids["fail"]:
            entry.update(user_id=1234, group_id=555, current_working_directory="/home/u1234")
    published = observed_by(CapturedSlurm(capture, [listing]), poll_once)
    seen = {capture.names.get(o.job_id): o for o in published}
    assert (seen["fail"].user_id, seen["fail"].group_id, seen["fail"].work_dir) == (1234, 555, "/home/u1234")
    assert (seen["ok"].user_id, seen["ok"].group_id, seen["ok"].work_dir) == (0, 0, "/work/main")


@pytest.mark.parametrize("release", RELEASES)
def test_a_job_only_accounting_knows_says_whose_it_is_where_sacct_can(release):
    """sacct's UID and GID where the capture asked for them (22.05's); WorkDir on every release."""
    capture = Capture(release)
    published = observed_by(CapturedSlurm(capture, [{"jobs": []}]), poll_once)
    fail = next(o for o in published if o.job_id == capture.ids["fail"])
    has_ids = "UID" in capture.sacct_fields
    assert (fail.user_id, fail.group_id) == ((0, 0) if has_ids else (None, None))
    assert fail.work_dir == "/work/main"


def test_an_unknown_owner_is_none_not_guessed():
    capture = Capture("26.05")
    listing = capture.json("squeue-all.json")
    for entry in listing["jobs"]:
        if str(entry["job_id"]) == capture.ids["fail"]:
            entry.update(user_id="root", group_id=None)
            del entry["current_working_directory"]
    published = observed_by(CapturedSlurm(capture, [listing]), poll_once)
    fail = next(o for o in published if o.job_id == capture.ids["fail"])
    assert (fail.user_id, fail.group_id, fail.work_dir) == (None, None, "")
    assert isinstance(fail, JobObserved) and fail.state == "FAILED"


@pytest.mark.parametrize("release", ["24.11", "26.05"])
def test_slurmdbd_records_name_the_working_directory(release):
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "slurmrest" / release / "slurmdb-job.json"
    answer = json.loads(fixture.read_text())
    (record, *_) = accounted_from_rest(answer)
    assert record.work_dir == "/work/wt20" and record.user_id is None  # slurmdbd names the user, gives no id
    assert (record.user_name, record.group_name) == ("root", "root")
    # The REST adapter looks the names up in this host's user database; a name it does not know stays None.
    (known,) = with_ids([record])
    assert (known.user_id, known.group_id) == (0, 0)
    (unknown,) = with_ids([replace(record, user_name="no-such-user-x9", group_name="no-such-group-x9")])
    assert (unknown.user_id, unknown.group_id) == (None, None)


# --- accounting (sacct -P text) ---------------------------------------------------------------------

FIELDS = ("JobIDRaw", "JobName", "State", "ExitCode", "Submit", "End", "NodeList", "Partition", "WorkDir", "User",
          "UID", "GID", "SubmitLine", "Comment")
"""What 22.05's sacct prints of what relaunch asks (tests/fixtures/slurm/22.05/sacct.fields)."""


def sacct_record(delimiter: str, job_id: str, name: str, comment: str, state: str = "COMPLETED") -> str:
    values = {"JobIDRaw": job_id, "JobName": name, "State": state, "ExitCode": "0:0", "Submit": "2026-12-04T21:26:58",
              "End": "2026-12-04T21:27:01", "NodeList": "node4", "Partition": "debug", "WorkDir": "/home/u",
              "User": "u", "UID": "1000", "GID": "100", "SubmitLine": f"sbatch -J {name} --comment={comment} a.sh",
              "Comment": comment}
    return delimiter.join(values[f] for f in FIELDS) + "\n"


# A name and a comment that would forge a failed record of someone else's job 777 were the fields
# separated by the fixtures' "\x1f" alone, or records by lines.
FORGED = "\n777\x1fvictim\x1fFAILED\x1f1:0\x1f2026-12-04T21:00:00\x1f2026-12-04T21:01:00\x1fnode1\x1fdebug\x1f/\x1fv" \
         "\x1f1001\x1f100\x1fsbatch\x1frelaunch"


@pytest.mark.parametrize("name, comment", [
    ("x Requeue=0" + FORGED, "relaunch"), ("x", "relaunch StdOut=/etc/shadow" + FORGED),
    ("nl\nRequeue=0", "relaunch\nStdOut=/etc/shadow\n"), ("a|b\x1fc", "relaunch|x"), ("x\n777", "relaunch\n778"),
    ("\n", "\n\n"),
])
def test_a_user_s_text_in_accounting_is_one_field_of_one_record(name, comment):
    delimiter = "\x1f5f0c9e2a41b7d3e8\x1f"
    text = sacct_record(delimiter, "11", name, comment) + sacct_record(delimiter, "12", "ok", "relaunch")
    first, second = parse_sacct(text, FIELDS, delimiter)
    assert (first.job_id, first.name, first.comment, first.state) == ("11", name, comment, "COMPLETED")
    assert (first.user_id, first.group_id, first.work_dir) == (1000, 100, "/home/u")
    assert (second.job_id, second.name, second.comment) == ("12", "ok", "relaunch")


async def test_the_adapter_asks_sacct_with_a_delimiter_made_for_each_call():
    delimiters = []

    class Accounting(Slurm):
        async def _run(self, argv):
            if argv[1] == "--helpformat":
                return " ".join(FIELDS)
            delimiter = next(a for a in argv if a.startswith("--delimiter=")).removeprefix("--delimiter=")
            delimiters.append(delimiter)
            return sacct_record(delimiter, "11", "x" + FORGED, "relaunch" + FORGED)

    slurm = Accounting()
    for _ in range(2):
        (record,) = await slurm.accounting(["11"])
        assert record.job_id == "11" and record.name == "x" + FORGED and record.comment == "relaunch" + FORGED
    assert len(set(delimiters)) == 2 and all(len(d) >= 16 for d in delimiters)
