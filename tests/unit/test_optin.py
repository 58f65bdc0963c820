from relaunch.common.optin import parse_comment


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
