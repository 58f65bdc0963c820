"""The signature catalogue as data: what the loader refuses, and what it derives from the patterns."""

import re

import pytest

from relaunch.common.diagnosis.pattern_analysis import (
    backtracking_risk, required_literals, top_level_alternatives,
)
from relaunch.common.diagnosis.signatures import (
    CatalogueError, builtin_catalogue, load_catalogue, parse_catalogue,
)

GOOD = """
[[signature]]
id = "x"
pattern = 'boom (?P<node>n\\d+)'
category = "c"
fault_domain = "unknown"
action = "restart"
cascade = false
summary = "s"
examples = ["boom n1"]
"""


def test_a_good_file_loads_with_its_defaults():
    sig = parse_catalogue(GOOD, "ops.toml").signatures[0]
    assert (sig.id, sig.role, sig.cascade, sig.keywords) == ("x", "cause", False, frozenset({"boom n"}))


@pytest.mark.parametrize("change, message", [
    (('cascade = false', 'cascade = false\ncolour = "red"'), "unknown \\['colour'\\]"),
    (('summary = "s"\n', ''), "missing \\['summary'\\]"),
    (('"unknown"', '"cosmic"'), "fault_domain"),
    (('"restart"', '"reboot"'), "action"),
    (('cascade = false', 'cascade = "no"'), "cascade has the wrong type"),
    (('cascade = false', 'cascade = false\nrole = "primary"'), "role must be one of"),
    (('cascade = false', 'cascade = true\nrole = "cause"'), "cascade must be true exactly"),
    (('cascade = false', 'cascade = false\nrole = "teardown"'), "cascade must be true exactly"),
    (("'boom (?P<node>n\\d+)'", "'(unclosed'"), "bad pattern"),
    (("'boom (?P<node>n\\d+)'", "'x*'"), "matches an empty line"),
    (("'boom (?P<node>n\\d+)'", "'(?:a+)+b'"), "variable quantifier inside a repeated group"),
    (("'boom (?P<node>n\\d+)'", "'(?:a|ab)*c'"), "alternation inside a repeated group"),
    (("'boom (?P<node>n\\d+)'", "'boom (?P<host>n\\d+)'"), "unknown named groups \\['host'\\]"),
    (('examples = ["boom n1"]', 'examples = ["bang n1"]'), "does not match its example"),
    (('id = "x"', 'id = "Has Spaces"'), "id must be"),
])
def test_bad_entries_are_refused_with_the_file_and_the_entry_named(change, message):
    text = GOOD.replace(*change)
    with pytest.raises(CatalogueError, match=message) as info:
        parse_catalogue(text, "ops.toml")
    assert "ops.toml" in str(info.value)


def test_unknown_tables_duplicate_ids_and_bad_toml_are_refused():
    with pytest.raises(CatalogueError, match="unknown top-level keys"):
        parse_catalogue(GOOD + "\n[[signatures]]\nid='y'\n", "ops.toml")
    with pytest.raises(CatalogueError, match="duplicate signature ids"):
        parse_catalogue(GOOD + GOOD, "ops.toml")
    with pytest.raises(CatalogueError, match="not valid TOML"):
        parse_catalogue("[[signature]\n", "ops.toml")


XID = """
[[xid_class]]
id = "hw"
codes = [48, 79]
category = "c"
fault_domain = "hardware"
action = "restart_excluding"
cascade = false
role = "decisive"
summary = "s"

[[xid_class]]
id = "app"
codes = [13]
category = "c"
fault_domain = "application"
action = "restart"
cascade = true
summary = "s"
escalate_to = "hw"
escalate_after = 2
"""


def test_xid_classes_are_validated_and_resolved():
    classes = parse_catalogue(XID, "x.toml").xid_classes
    assert classes[48].id == "hw" and classes[13].escalate_to is classes[79]
    with pytest.raises(CatalogueError, match="XID 13 is in both"):
        parse_catalogue(XID.replace("codes = [48, 79]", "codes = [48, 13]"), "x.toml")
    with pytest.raises(CatalogueError, match="escalate_to must name"):
        parse_catalogue(XID.replace('escalate_to = "hw"', 'escalate_to = "nope"'), "x.toml")
    with pytest.raises(CatalogueError, match="go together"):
        parse_catalogue(XID.replace("escalate_after = 2", "escalate_after = 1"), "x.toml")
    with pytest.raises(CatalogueError, match="codes must be"):
        parse_catalogue(XID.replace("codes = [13]", "codes = ['13']"), "x.toml")


def test_a_locator_needs_a_node_or_rank_group():
    locator = "[[locator]]\nid = 'l'\npattern = 'host (?P<node>\\w+)'\n"
    assert parse_catalogue(locator, "l.toml").locators[0].id == "l"
    with pytest.raises(CatalogueError, match="needs a `node` or `rank` group"):
        parse_catalogue(locator.replace("(?P<node>\\w+)", "\\w+"), "l.toml")
    with pytest.raises(CatalogueError, match="unknown"):
        parse_catalogue(locator + "role = 'x'\n", "l.toml")


def test_operator_files_come_first_and_may_not_reuse_builtin_ids(tmp_path):
    ops = tmp_path / "ops.toml"
    ops.write_text(GOOD.replace('pattern = \'boom (?P<node>n\\d+)\'', "pattern = 'Segmentation fault'")
                   .replace('examples = ["boom n1"]', ""))
    catalogue = load_catalogue([str(ops)])
    assert catalogue.signatures[0].id == "x" and len(catalogue) == len(builtin_catalogue()) + 1
    ops.write_text(GOOD.replace('id = "x"', 'id = "segfault"'))
    with pytest.raises(CatalogueError, match="duplicate signature ids \\['segfault'\\]"):
        load_catalogue([str(ops)])


def test_the_builtin_catalogue_is_sound():
    catalogue = builtin_catalogue()
    errors = [s for s in catalogue.signatures if s.role != "advice"]
    assert len(errors) >= 60
    assert all(s.examples for s in catalogue.signatures), "every built-in signature shows what it matches"
    assert all(s.keywords for s in errors), "every built-in error signature can be prefiltered"
    assert {s.fault_domain for s in errors} >= {"hardware", "infrastructure", "application", "resource",
                                                "scheduler", "unknown"}


@pytest.mark.parametrize("pattern, literals", [
    (r"Segmentation fault", {"segmentation fault"}),
    (r"(?i)foo|far\b(?:x|y)+", {"foo", "far"}),
    (r"NVRM: Xid \((?P<gpu>[^)]{1,40})\): (?P<xid>\d+)", {"nvrm: xid ("}),
    (r"\bGPU (?:is |has been |)lost\b", {"gpu is lost", "gpu has been lost", "gpu lost"}),
    (r"(?:ab)+cdef", {"cdef"}),
    (r"a.c", None),
    (r"x?yz", None),
])
def test_required_literals_come_from_the_parse_tree(pattern, literals):
    assert required_literals(pattern) == (None if literals is None else frozenset(literals))


def test_every_match_contains_a_required_literal():
    """The prefilter's promise, checked on every built-in example and alternative."""
    for sig in builtin_catalogue().signatures:
        for source in top_level_alternatives(sig.pattern.pattern):
            words = required_literals(source)
            piece = re.compile(source, sig.pattern.flags)
            for example in sig.examples:
                found = piece.search(example)
                if found and words:
                    assert any(w in example.lower() for w in words), (sig.id, source, example)


def test_backtracking_risk_spots_nested_quantifiers_only():
    assert backtracking_risk(r"(\w+\s?)+$") and backtracking_risk(r"(?:x|xy){2,}")
    assert backtracking_risk(r"^(?:\[[^\]]{1,60}\]:? ?)?\s{0,12}x") is None
    assert backtracking_risk(r"(?:abc){3}") is None


def test_top_level_alternatives_respect_groups_classes_and_escapes():
    assert top_level_alternatives(r"(?i)a|b(c|d)|[|\]]x|\|y") == ["(?i)a", "b(c|d)", r"[|\]]x", r"\|y"]
    assert top_level_alternatives("single") == ["single"]
