"""docs/accuracy.md is what scripts/corpus_accuracy.py makes of the corpus (tests/corpus) and the catalogue
today, and tests/corpus/heldout.txt is the README's split rule applied to its ids."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("relaunch_corpus_accuracy_script",
                                                  REPO / "scripts" / "corpus_accuracy.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_accuracy_page_is_up_to_date():
    gen = _generator()
    corpus = REPO / "tests" / "corpus"
    assert (REPO / "docs" / "accuracy.md").read_text() == gen.render(corpus=corpus), (
        "docs/accuracy.md is stale: run `.venv/bin/python scripts/corpus_accuracy.py` and commit the diff")


def test_the_held_out_list_follows_the_rule():
    gen = _generator()
    corpus = REPO / "tests" / "corpus"
    ids = [label["id"] for label in gen.labels(corpus)]
    assert gen.heldout_ids(corpus) == {label_id for label_id in ids if gen.held_out(label_id)}, (
        "tests/corpus/heldout.txt differs from the rule: run `.venv/bin/python scripts/corpus_accuracy.py --split`")


def test_every_label_is_well_formed_and_has_its_log():
    gen = _generator()
    corpus = REPO / "tests" / "corpus"
    labels = gen.labels(corpus)
    ids = [label["id"] for label in labels]
    assert len(ids) == len(set(ids)), "duplicate ids in labels.jsonl"
    assert {path.stem for path in (corpus / "logs").glob("*.log")} == set(ids), "a log without a label or back"
    for label in labels:
        assert label["source_url"].startswith("https://"), label["id"]
        assert label["expected_action"] in {*gen.ACTIONS, "restart_after_fix_unknown", "none"}, label["id"]
        assert label["implicates"] in {*gen.DOMAINS, "none"}, label["id"]
        assert (label["implicates"] == "none") == (label["expected_action"] == "none"), label["id"]
        assert (corpus / "logs" / f"{label['id']}.log").read_bytes().strip(), label["id"]
