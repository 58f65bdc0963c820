"""User-supplied text: job comments (anyone who can submit a job writes one) are only parsed, safely,
whatever they hold; job ids and node names are validated before any Slurm argv is built; and no
relaunch code ever hands a string to a shell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from relaunch.actuator.adapters.slurm import Slurm
from relaunch.common.errors import PermanentError
from relaunch.common.optin import MAX_ERRORS, OPTIONS, POLICY_NAME, TOKEN, parse_comment

REPO = Path(__file__).resolve().parents[2]
SHELLISH = "relaunch:=,;policy max_attempts exclude on off 0123456789 \n\r\t'\"`$(){}[]|&;<>*?!~#\\%^"
COMMENTS = st.one_of(
    st.text(alphabet=SHELLISH, max_size=600),
    st.text(max_size=300),  # any unicode, NULs and surrogates-free controls included
    st.builds(lambda a, b: f"{a}relaunch:{b}", st.text(alphabet=SHELLISH, max_size=50),
              st.text(alphabet=SHELLISH, max_size=200)),
    st.builds(lambda s, n: (s * n)[:10_240], st.text(alphabet=SHELLISH, min_size=1, max_size=40), st.integers(1, 2000)),
)


@settings(max_examples=400, deadline=None)
@given(COMMENTS)
def test_any_comment_parses_to_a_bounded_answer(comment):
    opt = parse_comment(comment)
    if TOKEN not in comment:
        assert not opt.opted_in
    assert len(opt.errors) <= MAX_ERRORS + 1
    assert all(len(e) <= 600 for e in opt.errors), max(map(len, opt.errors))
    assert opt.policy is None or POLICY_NAME.fullmatch(opt.policy)
    for name, value in opt.options.items():
        spec = OPTIONS[name]
        assert isinstance(value, int) and spec.minimum <= value <= spec.maximum, (name, value)


@pytest.mark.parametrize("comment", [
    "relaunch:policy=$(rm -rf /)", "relaunch:policy=`id`", "relaunch;reboot", "relaunch:max_attempts=3;rm -rf ~",
    "relaunch:policy=default\nrelaunch:policy=other", "relaunch:policy='\"quoted\"'", "x" * 10_240 + " relaunch",
    "relaunch:max_attempts=²", "relaunch:max_attempts=99999999999999999999", "relaunch:" + "a=1," * 5000,
])
def test_hostile_comments_are_parsed_not_obeyed(comment):
    opt = parse_comment(comment)
    assert opt.policy is None or POLICY_NAME.fullmatch(opt.policy)
    assert len(opt.errors) <= MAX_ERRORS + 1 and all(len(e) <= 600 for e in opt.errors)


JOB_ID = re.compile(r"[0-9]{1,12}(_[0-9]{1,8})?")
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.sampled_from(["requeuehold", "release", "start_now", "exclude", "cancel"]))
@example("12\n", "cancel")  # `$` in a pattern matches before a trailing newline: fullmatch does not
def test_a_job_id_reaches_a_slurm_argv_only_when_valid(job_id, step):
    if JOB_ID.fullmatch(job_id):
        assert job_id in " ".join(Slurm.argv(step, job_id, ["node1"]))
    else:
        with pytest.raises(PermanentError, match="refusing to pass"):
            Slurm.argv(step, job_id, ["node1"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=20), min_size=1, max_size=3))
@example(["node1\n"])
def test_node_names_reach_a_slurm_argv_only_when_valid(nodes):
    if all(NODE.fullmatch(n) for n in nodes):
        assert Slurm.argv("exclude", "42", nodes)[-1] == "ExcNodeList=" + ",".join(nodes)
        Slurm.drain_argv(nodes[0], "relaunch: XID 79")
    else:
        with pytest.raises(PermanentError, match="refusing to pass"):
            Slurm.argv("exclude", "42", nodes)


@pytest.mark.parametrize("job_id", ["--help", "-1", "1;id", "1 2", "1,2", "$(id)", "", "1\n2", "１２"])
async def test_reading_a_hostile_job_id_never_runs_a_command(job_id):
    slurm = Slurm(env={"PATH": "/nonexistent"})  # had anything run, it would fail as "not installed"
    with pytest.raises(PermanentError, match="refusing to pass"):
        await slurm.show_job(job_id)
    with pytest.raises(PermanentError, match="refusing to pass"):
        await slurm.accounting([job_id])


@pytest.mark.parametrize("value", ["node1\n", "node1\r\nPUB x 1", "a b", "a.b", "a*", ">", ""])
def test_names_that_become_subject_tokens_are_validated(value):
    """Cluster and node names end up in NATS subjects: a newline there would be a protocol injection."""
    from relaunch.common.schemas import NodeHealth

    with pytest.raises(ValueError):
        NodeHealth(cluster="c", node=value, verdict="healthy", backend="fake", at="2026-01-01T00:00:00Z")
    with pytest.raises(ValueError):
        NodeHealth(cluster=value, node="n", verdict="healthy", backend="fake", at="2026-01-01T00:00:00Z")


def test_no_relaunch_code_uses_a_shell():
    pattern = re.compile(r"shell\s*=\s*True|os\.system\(|os\.popen\(|create_subprocess_shell|subprocess\.getoutput")
    sources = [p for root in ("libs", "services") for p in (REPO / root).rglob("*.py")]
    assert len(sources) > 50
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in sources
                 for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, offenders
