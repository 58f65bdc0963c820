"""The operator's policy file (validated whole at start) and resolve(): comment + policy -> effective policy."""

import textwrap

import pytest

from relaunch.common.optin import parse_comment
from relaunch.common.policies.policy_set import PolicyFileError, parse_policies, policy_keys, resolve
from relaunch.decider.domain.policy import Budgets, Policy
from relaunch.common.policies.policy_file import load_policies

OPERATOR = textwrap.dedent("""
    version = 1
    default_policy = "small"

    [policy.small]
    max_attempts = 2
    max_exclude = 1
    straggler = "off"
    hang_timeout_cap = 600
    restart_on_time_limit = false

    [policy.pretrain]
    max_attempts = 10
    straggler = "on"
    [policy.pretrain.budgets]
    hardware = 8
    [policy.pretrain.storm]
    restarts = 4
    window_s = 1800
""")


@pytest.fixture
def operator(tmp_path):
    path = tmp_path / "policies.toml"
    path.write_text(OPERATOR)
    return load_policies(path)


def write(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_built_in_default_policy_is_the_documented_defaults():
    builtin = load_policies()
    assert builtin.default == "default" and {"default", "pretrain"} <= set(builtin.names())
    assert builtin.policies["default"] == Policy()
    assert load_policies("") == builtin


def test_an_operator_file_is_read_and_left_out_keys_take_the_built_in_defaults(operator):
    small, pretrain = operator.policies["small"], operator.policies["pretrain"]
    assert operator.default == "small"
    assert (small.max_attempts, small.max_attempts_cap, small.max_exclude, small.hang_timeout_cap) == (2, 2, 1, 600)
    assert not small.straggler_allowed and not small.restart_on_time_limit and small.restart_on_preemption
    assert pretrain.budgets == Budgets(hardware=8) and (pretrain.storm_restarts, pretrain.storm_window_s) == (4, 1800)
    assert pretrain.straggler and pretrain.straggler_allowed and pretrain.max_exclude == Policy().max_exclude


@pytest.mark.parametrize("text, key, words", [
    ('[policy.default]\nmax_atempts = 3\n', "policy.default.max_atempts", "unknown key"),
    ('[policy.default]\nmax_attempts = "3"\n', "policy.default.max_attempts", "integer from 1 to 1000"),
    ('[policy.default]\nmax_attempts = 0\n', "policy.default.max_attempts", "integer from 1 to 1000"),
    ('[policy.default]\nmax_exclude = true\n', "policy.default.max_exclude", "integer"),
    ('[policy.default]\nrestart_on_preemption = 1\n', "policy.default.restart_on_preemption", "true or false"),
    ('[policy.default]\nstraggler = true\n', "policy.default.straggler", '"off", "opt-in" or "on"'),
    ('[policy.default]\nhang_timeout_cap = 5\n', "policy.default.hang_timeout_cap", "at least 10"),
    ('[policy.default]\nib_pair = "either"\n', "policy.default.ib_pair", "must be 'both' or 'one'"),
    ('[policy.default]\nib_pair = 1\n', "policy.default.ib_pair", "must be 'both' or 'one'"),
    ('[policy.default]\nmax_attempts = 5\nmax_attempts_cap = 4\n', "policy.default.max_attempts_cap",
     "at least max_attempts"),
    ('[policy.default.budgets]\ngpu = 3\n', "policy.default.budgets.gpu", "unknown failure class"),
    ('[policy.default.budgets]\nhardware = -1\n', "policy.default.budgets.hardware", "integer from 0"),
    ('[policy.default]\nbudgets = 3\n', "policy.default.budgets", "must be a table"),
    ('[policy.default.storm]\nrestarts = 3\nwindow = 60\n', "policy.default.storm.window", "unknown key"),
    ('[policy.default.storm]\nwindow_s = 0\n', "policy.default.storm.window_s", "integer from 1"),
    ('[policy.Default]\n', "policy.Default", "policy name"),
    ('default_policy = "big"\n[policy.default]\n', "default_policy", "'big' is not a policy of this file"),
    ('version = 2\n[policy.default]\n', "version", "reads version 1"),
    ('colour = "blue"\n[policy.default]\n', "colour", "unknown key"),
    ('version = 1\n', "policy", "at least one policy"),
])
def test_validation_errors_name_the_file_and_the_key(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(PolicyFileError) as caught:
        load_policies(path)
    message = str(caught.value)
    assert f"{path}: {key}: " in message and words in message, message


def test_every_error_of_a_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, '[policy.default]\nmax_attempts = "x"\nmax_exclude = 99\nflavour = 1\n')
    with pytest.raises(PolicyFileError) as caught:
        load_policies(path)
    assert str(caught.value).count(str(path)) == 3


def test_unreadable_and_malformed_files_say_so(tmp_path):
    with pytest.raises(PolicyFileError, match="cannot read policy file .*missing.toml"):
        load_policies(tmp_path / "missing.toml")
    with pytest.raises(PolicyFileError, match="not valid TOML"):
        load_policies(write(tmp_path, "[policy.default\n"))


def test_policy_keys_are_listed_for_the_docs():
    expected = {"max_attempts", "max_attempts_cap", "budgets.application", "storm.window_s", "ib_pair"}
    assert expected <= set(policy_keys())


def test_ib_pair_is_read_and_defaults_to_both(tmp_path):
    policies = load_policies(write(tmp_path, '[policy.default]\n[policy.wide]\nib_pair = "one"\n'))
    assert policies.policies["default"].ib_pair == "both" and policies.policies["wide"].ib_pair == "one"
    assert resolve(parse_comment("relaunch:policy=wide"), policies).as_dict()["ib_pair"] == "one"
    assert load_policies().policies["pretrain"].ib_pair == "one"


# --- resolve: a job may tighten its policy, never loosen it ---------------------------------------------

@pytest.mark.parametrize("comment, expected", [
    ("relaunch", {"name": "small", "max_attempts": 2, "max_exclude": 1, "straggler": False}),
    ("relaunch:max_attempts=1", {"max_attempts": 1}),
    ("relaunch:max_exclude=0", {"max_exclude": 0}),
    ("relaunch:exclude=off", {"max_exclude": 0}),
    ("relaunch:exclude=on", {"max_exclude": 1}),
    ("relaunch:hang_timeout=300", {"hang_timeout": 300}),
    ("relaunch:preemption=off", {"restart_on_preemption": False}),
    ("relaunch:straggler=off", {"straggler": False}),
    ("relaunch:policy=pretrain", {"name": "pretrain", "max_attempts": 10, "straggler": True}),
    ("relaunch:policy=pretrain,straggler=off,max_attempts=5", {"straggler": False, "max_attempts": 5}),
    ("relaunch:policy=pretrain,time_limit=on,hang_timeout=90000", {"restart_on_time_limit": True,
                                                                   "hang_timeout": 90000}),
])
def test_tightening_is_accepted(operator, comment, expected):
    policy = resolve(parse_comment(comment), operator)
    assert not policy.observe_only and not policy.option_errors
    assert {k: getattr(policy, k) for k in expected} == expected


@pytest.mark.parametrize("comment, words", [
    ("relaunch:max_attempts=3", "max_attempts=3 loosens policy 'small' (at most 2)"),
    ("relaunch:max_exclude=2", "max_exclude=2 loosens policy 'small' (at most 1)"),
    ("relaunch:hang_timeout=601", "hang_timeout=601 loosens policy 'small' (at most 600 s)"),
    ("relaunch:straggler=on", "straggler=on loosens policy 'small' (straggler recovery is off)"),
    ("relaunch:time_limit=on", "time_limit=on loosens policy 'small'"),
    ("relaunch:policy=pretrain,max_attempts=11", "max_attempts=11 loosens policy 'pretrain' (at most 10)"),
    ("relaunch:policy=huge", "policy 'huge' is not one the operator approved (known: pretrain, small)"),
])
def test_loosening_or_an_unknown_policy_makes_the_job_observe_only_with_the_reason(operator, comment, words):
    policy = resolve(parse_comment(comment), operator)
    assert policy.observe_only and any(words in e for e in policy.option_errors), policy.option_errors


def test_exclude_on_loosens_a_policy_that_excludes_nothing(tmp_path):
    policies = load_policies(write(tmp_path, "[policy.default]\nmax_exclude = 0\n"))
    assert "exclude=on loosens" in resolve(parse_comment("relaunch:exclude=on"), policies).option_errors[0]
    assert not resolve(parse_comment("relaunch:exclude=off"), policies).observe_only


def test_grammar_and_policy_errors_are_listed_together(operator):
    policy = resolve(parse_comment("relaunch:max_attempts=9,colour=red"), operator)
    assert policy.observe_only and len(policy.option_errors) == 2


def test_version_1_comments_stay_valid_under_the_built_in_policies():
    builtin = load_policies()
    for comment in ("relaunch", "relaunch:max_attempts=100", "relaunch:max_attempts=5,hang_timeout=600,straggler=on",
                    "relaunch:hang_timeout=604800"):
        assert not resolve(parse_comment(comment), builtin).observe_only, comment
    assert resolve(parse_comment("relaunch"), builtin).max_attempts == 3


def test_parse_policies_takes_parsed_data():
    policies = parse_policies({"policy": {"default": {"max_attempts": 4}}}, "inline")
    assert policies.policies["default"].max_attempts == 4 and policies.source == "inline"
