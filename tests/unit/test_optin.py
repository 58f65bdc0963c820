import pytest

from relaunch.common.optin import GRAMMAR_VERSION, MAX_ERRORS, OptIn, parse_comment


def test_plain_token_opts_in_with_defaults():
    optin = parse_comment("relaunch")
    assert optin.opted_in and not optin.errors and optin.max_attempts == 3


def test_options_and_other_text_share_the_comment():
    for comment in ("run=abc relaunch:max_attempts=2", "x;relaunch:max_attempts=2;y", "relaunch:max_attempts=2\tfoo"):
        optin = parse_comment(comment)
        assert optin.opted_in and optin.max_attempts == 2 and not optin.errors, comment


def test_no_token_is_not_opted_in():
    for comment in (None, "", "relaunched", "my-relaunch", "run=relaunch:x"):
        assert not parse_comment(comment).opted_in, comment


def test_malformed_options_make_the_job_observe_only_and_say_why():
    optin = parse_comment("relaunch:max_attempts=zero,colour=blue,flag")
    assert optin.opted_in and optin.observe_only
    text = " ".join(optin.errors)
    assert "max_attempts must be an integer" in text and "unknown option 'colour'" in text and "'flag'" in text


def test_out_of_range_and_repeated_options_are_errors():
    assert parse_comment("relaunch:max_attempts=0").errors
    assert parse_comment("relaunch:max_attempts=101").errors
    assert parse_comment("relaunch:max_attempts=2,max_attempts=3").errors
    assert parse_comment("relaunch relaunch:max_attempts=2").errors


def test_hostile_comments_are_parsed_as_text():
    comment = "relaunch:max_attempts=2 $(rm -rf /) `id` \"quoted\" 'x'\n;|&" + "A" * 10_000
    optin = parse_comment(comment)
    assert optin.opted_in and optin.max_attempts == 2 and not optin.errors


def test_hang_and_straggler_options():
    optin = parse_comment("relaunch:max_attempts=4,hang_timeout=120,straggler=on")
    assert not optin.errors and optin.get("hang_timeout") == 120 and optin.get("straggler") == 1
    assert parse_comment("relaunch").get("straggler") == 0
    assert "on or off" in parse_comment("relaunch:straggler=maybe").errors[0]
    assert parse_comment("relaunch:hang_timeout=5").errors


# --- grammar version 2 (docs/policy.md) -------------------------------------------------------------

@pytest.mark.parametrize("comment, options", [
    # Every version-1 comment means the same under version 2.
    ("relaunch", {}),
    ("relaunch:", {}),
    ("relaunch:max_attempts=2", {"max_attempts": 2}),
    ("relaunch:hang_timeout=600", {"hang_timeout": 600}),
    ("relaunch:straggler=off", {"straggler": 0}),
    ("relaunch:max_attempts=5,hang_timeout=600,straggler=on", {"max_attempts": 5, "hang_timeout": 600,
                                                               "straggler": 1}),
])
def test_version_1_comments_are_unchanged(comment, options):
    optin = parse_comment(comment)
    assert GRAMMAR_VERSION >= 3  # and under every later version
    assert optin.opted_in and not optin.errors and optin.options == options and optin.policy is None


def test_a_comment_names_a_policy_and_tightening_options():
    optin = parse_comment("relaunch:policy=pretrain,max_attempts=5,straggler=on,exclude=on")
    assert not optin.errors and optin.policy == "pretrain"
    assert optin.options == {"max_attempts": 5, "straggler": 1, "exclude": 1}
    assert "policy" not in optin.options  # numeric readers (the detector) never meet a string
    optin = parse_comment("relaunch:exclude=off,max_exclude=1,time_limit=off,preemption=OFF")
    assert not optin.errors and optin.options == {"exclude": 0, "max_exclude": 1, "time_limit": 0, "preemption": 0}


@pytest.mark.parametrize("comment, words", [
    ("relaunch:policy=", "must be a policy name"),
    ("relaunch:policy=Pretrain", "must be a policy name"),
    ("relaunch:policy=a/b", "must be a policy name"),
    ("relaunch:policy=" + "p" * 33, "must be a policy name"),
    ("relaunch:policy=a,policy=b", "policy is given twice"),
    ("relaunch:exclude=maybe", "exclude must be on or off"),
    ("relaunch:max_exclude=65", "max_exclude must be an integer from 0 to 64"),
    ("relaunch:time_limit=2", "time_limit must be on or off"),
    ("relaunch:budget=3", "unknown option 'budget'"),
])
def test_malformed_version_2_options_are_errors_that_say_what_is_wrong(comment, words):
    optin = parse_comment(comment)
    assert optin.opted_in and optin.observe_only and words in " ".join(optin.errors), optin.errors


@pytest.mark.parametrize("value", ["²", "٣", "３", "-1", "+2", " 2", "2.0", "0x2", "1e2", "9" * 5000, ""])
def test_numbers_are_plain_ascii_digits_and_never_raise(value):
    optin = parse_comment(f"relaunch:max_attempts={value}")
    assert optin.observe_only and "max_attempts must be an integer" in optin.errors[0]
    assert len(optin.errors[0]) < 200  # the value is cut before it is quoted


def test_hostile_comments_cannot_flood_the_errors_or_smuggle_control_characters():
    flood = parse_comment("relaunch:" + ",".join(f"k{i}=v" for i in range(2000)))
    assert flood.observe_only and len(flood.errors) == MAX_ERRORS + 1 and "more errors" in flood.errors[-1]
    sneaky = parse_comment("relaunch:policy=\x1b[31mred,colour\x07=x\u202e")
    text = " ".join(sneaky.errors)
    assert sneaky.observe_only and "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    nul = parse_comment("relaunch:max_attempts=2\x00,straggler=on")
    assert nul.observe_only and "\\x00" in nul.errors[0]


def test_options_past_the_cut_are_not_read():
    optin = parse_comment("x" * 5000 + " relaunch:max_attempts=2")
    assert not optin.opted_in


def test_optin_keeps_its_v1_construction_and_accessors():
    optin = OptIn(True, {"max_attempts": 4})
    assert optin.max_attempts == 4 and optin.get("straggler") == 0 and optin.get("exclude") == 1
    assert not optin.observe_only and optin.policy is None
    assert not OptIn(False).observe_only


# --- grammar version 3 (docs/policy.md) -------------------------------------------------------------

def test_version_3_adds_the_straggler_threshold_and_the_detector_reads_it():
    from relaunch.common.policies.policy_file import load_policies
    from relaunch.common.policies.policy_set import resolve
    from relaunch.detector.domain.stragglers import StragglerPolicy, policy_with_options

    optin = parse_comment("relaunch:hang_timeout=30,straggler_threshold=50")
    assert not optin.errors and optin.options == {"hang_timeout": 30, "straggler_threshold": 50}
    assert not resolve(optin, load_policies()).observe_only  # it sets what is slow, not what is allowed
    assert policy_with_options(StragglerPolicy(), optin.options).fraction == pytest.approx(0.5)
    for bad in ("4", "91", "half"):
        words = "straggler_threshold must be an integer from 5 to 90"
        assert words in " ".join(parse_comment(f"relaunch:straggler_threshold={bad}").errors)


# --- grammar version 4 (docs/policy.md): spaces inside the token are read, not dropped ---------------

@pytest.mark.parametrize("comment, options", [
    ("relaunch: max_attempts=1", {"max_attempts": 1}),
    ("relaunch:  max_attempts=1", {"max_attempts": 1}),
    ("run=abc relaunch: max_attempts=2;y=1", {"max_attempts": 2}),
    ("relaunch:max_attempts=1, hang_timeout=600", {"max_attempts": 1, "hang_timeout": 600}),
    ("relaunch: max_attempts=2, straggler=on, exclude=off x", {"max_attempts": 2, "straggler": 1, "exclude": 0}),
])
def test_a_space_after_the_colon_or_a_comma_keeps_the_options(comment, options):
    optin = parse_comment(comment)
    assert GRAMMAR_VERSION >= 4  # (version 5 only adds checkpoint_failures)
    assert optin.opted_in and not optin.errors and optin.options == options, comment


def test_a_spaced_piece_that_is_no_option_is_an_error_not_a_silence():
    optin = parse_comment("relaunch: max_atempts=1")
    assert optin.observe_only and "unknown option 'max_atempts'" in optin.errors[0]


@pytest.mark.parametrize("comment", ["relaunch: run 7", "relaunch:;max_attempts=1", "relaunch: ; x=1",
                                     "relaunch:max_attempts=2 note=x", "relaunch:"])
def test_version_3_comments_mean_the_same_under_version_4(comment):
    optin = parse_comment(comment)
    assert optin.opted_in and not optin.errors, comment


def test_a_hostile_chain_of_spaced_options_is_cheap():
    optin = parse_comment("relaunch: " + "a=1, " * 2000)
    assert optin.observe_only and len(optin.errors) == MAX_ERRORS + 1
