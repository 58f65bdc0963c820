"""relaunch.common.display.printable: text from a job shown without its control characters."""

import pytest

from relaunch.common.display import printable


def test_escape_sequences_are_written_out_not_passed_through():
    hostile = "[bold red]x[/]\x1b]0;PWNED\x07\x1b[2J"
    shown = printable(hostile)
    assert shown == "[bold red]x[/]\\x1b]0;PWNED\\x07\\x1b[2J"
    assert "\x1b" not in shown and "\x07" not in shown


@pytest.mark.parametrize("raw, shown", [
    ("a\rb", "a\\rb"), ("a\nb", "a\\nb"), ("a\tb", "a\\tb"), ("\x00", "\\x00"), ("\x7f", "\\x7f"),
    ("\x9b2J", "\\x9b2J"),  # C1 CSI: one byte that some terminals read as ESC [
    ("evil\u202eexe.txt", "evil\\u202eexe.txt"), ("a\u2028b", "a\\u2028b"),
])
def test_every_control_character_is_escaped(raw, shown):
    assert printable(raw) == shown


def test_printable_unicode_and_plain_text_are_kept():
    for text in ("NCCL WARN net.cc:123 héllo 世界 🚀 loss=1.0", "node[1-4] /scratch/x y.log", "", "a\u00a0b"):
        assert printable(text) == text


def test_none_and_non_strings():
    assert printable(None) == "" and printable(42) == "42"
