#!/usr/bin/env python3
"""Generate docs/accuracy.md: the classifier's accuracy per failure class on the corpus of real logs
(tests/corpus, see its README), on the development split and on the held-out split side by side.

    .venv/bin/python scripts/corpus_accuracy.py            # rewrite docs/accuracy.md
    .venv/bin/python scripts/corpus_accuracy.py --check    # exit 1 and print the diff when it is stale
    .venv/bin/python scripts/corpus_accuracy.py --split    # rewrite tests/corpus/heldout.txt by the rule

Every log goes through the pipeline `relaunch classify --json` runs
(relaunch.common.diagnosis.offline.verdict_of_stream, built-in catalogue) and is scored by the README's
mapping. A unit test (tests/unit/test_docs_accuracy.py) fails when the checked-in page differs from
what this makes: regenerate it after changing the catalogue or the corpus. RELAUNCH_CORPUS names another
corpus folder (labels.jsonl, logs/, heldout.txt).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("RELAUNCH_CORPUS", REPO / "tests" / "corpus"))
OUTPUT = REPO / "docs" / "accuracy.md"

ACTIONS = {"restart": "restart", "restart_exclude_node": "restart_excluding", "no_retry": "stop"}
DOMAINS = {"hardware": "hardware", "software_infra": "infrastructure", "user_code": "application",
           "resource": "resource", "scheduler": "scheduler", "unknown": "unknown"}
RESTARTABLE = ("restart", "restart_exclude_node")
SPLITS = ("development", "held-out")


def held_out(label_id: str) -> bool:
    """The split rule (tests/corpus/README.md): an id is held out when the SHA-256 of its text, read as a
    number, is a multiple of 5. It depends on the id alone, so adding logs never moves one between splits."""
    return int(hashlib.sha256(label_id.encode()).hexdigest(), 16) % 5 == 0


def labels(corpus: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for line in (corpus / "labels.jsonl").read_text().splitlines() if line.strip()]


def heldout_ids(corpus: Path = CORPUS) -> set[str]:
    return {line.strip() for line in (corpus / "heldout.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")}


@dataclass(frozen=True)
class Score:
    label: dict
    split: str
    found: object  # Classification | None

    @property
    def detected(self) -> bool:
        return self.found is not None

    @property
    def action_right(self) -> bool:
        expected = self.label["expected_action"]
        if expected == "none":
            return self.found is None
        if expected == "restart_after_fix_unknown":
            return self.found is not None
        return self.found is not None and self.found.action == ACTIONS[expected]

    @property
    def false_stop(self) -> bool:
        return self.label["expected_action"] in RESTARTABLE and self.found is not None and self.found.action == "stop"

    @property
    def healthy_flagged(self) -> bool:
        return self.label["expected_action"] == "none" and self.found is not None

    @property
    def domain_right(self) -> bool:
        if self.label["implicates"] == "none":
            return self.found is None
        return self.found is not None and self.found.fault_domain == DOMAINS[self.label["implicates"]]

    @property
    def culprit_scored(self) -> bool:
        return self.label["expected_action"] == "restart_exclude_node" and bool(self.label.get("node_hint"))

    @property
    def culprit_hit(self) -> bool:
        return self.found is not None and self.label["node_hint"] in self.found.nodes

    def got(self) -> str:
        if self.found is None:
            return "no anomaly"
        return f"{self.found.action}, {self.found.category}, {self.found.fault_domain}"

    def expected(self) -> str:
        label = self.label
        return f"{label['expected_action']}, {label['category']}, {label['implicates']}"


def score(corpus: Path = CORPUS) -> list[Score]:
    from relaunch.common.diagnosis.offline import load_scanner, verdict_of_stream

    scanner = load_scanner()
    held = heldout_ids(corpus)
    out = []
    for label in labels(corpus):
        with open(corpus / "logs" / f"{label['id']}.log", "rb") as stream:
            found = verdict_of_stream(stream, scanner, line_numbers=False)
        out.append(Score(label, "held-out" if label["id"] in held else "development", found))
    return out


def _ratio(right: int, n: int) -> str:
    return f"{right}/{n} ({100 * right / n:.0f}%)" if n else "–"


def _row(name: str, scores: list[Score]) -> str:
    n = len(scores)
    restartable = [s for s in scores if s.label["expected_action"] in RESTARTABLE]
    healthy = [s for s in scores if s.label["expected_action"] == "none"]
    culprits = [s for s in scores if s.culprit_scored]
    return (f"| {name} | {n} | {_ratio(sum(s.action_right for s in scores), n)} "
            f"| {_ratio(sum(s.false_stop for s in restartable), len(restartable))} "
            f"| {_ratio(sum(s.healthy_flagged for s in healthy), len(healthy))} "
            f"| {_ratio(sum(s.domain_right for s in scores), n)} "
            f"| {_ratio(sum(s.culprit_hit for s in culprits), len(culprits))} |")


HEADER = ("| class | logs | action right | false stop (of restartable) | healthy flagged (of healthy) "
          "| fault domain right | culprit named (of exclusions with a host) |\n"
          "|---|---:|---:|---:|---:|---:|---:|")


def render(scores: list[Score] | None = None, corpus: Path = CORPUS) -> str:
    scores = score(corpus) if scores is None else scores
    by_split = {split: [s for s in scores if s.split == split] for split in SPLITS}
    lines = [
        "# Accuracy per failure class",
        "",
        "Generated by `.venv/bin/python scripts/corpus_accuracy.py` from the corpus of real log excerpts in",
        "`tests/corpus` (its README gives the labels, their sources and the split rule); do not edit by hand.",
        "Every log goes through the pipeline `relaunch classify --json` runs (the built-in signature catalogue,",
        "divergence and fp16 overflow storms from the progress lines) and is scored against its label:",
        "",
        "- **action right**: restart / restart_exclude_node / no_retry must give restart / restart_excluding /",
        "  stop; `restart_after_fix_unknown` (either is defensible) needs a detection; a healthy log must give",
        "  no anomaly;",
        "- **false stop**: a fault the label says to restart (with or without the culprit) classified `stop`:",
        "  the run is lost for nothing;",
        "- **healthy flagged**: a healthy log (warnings, no failure) that raised an anomaly;",
        "- **fault domain right**: hardware / software_infra / user_code / resource / scheduler / unknown must",
        "  give hardware / infrastructure / application / resource / scheduler / unknown (`unknown` strictly:",
        "  claiming to know sends the wrong node to the drain list); a healthy log must give no anomaly;",
        "- **culprit named**: for a label that expects the job restarted without a host and names it, that",
        "  host is among the anomaly's nodes (what gets excluded).",
        "",
        "The **held-out** split (`tests/corpus/heldout.txt`, a fifth of the ids chosen by a hash of the id",
        "before any verdict was looked at) is never tuned on: its figures say how the catalogue generalises;",
        "the **development** split is what the catalogue may be tuned on.",
        "",
        "## Summary",
        "",
        HEADER.replace("| class |", "| split |"),
    ]
    for split in SPLITS:
        lines.append(_row(split, by_split[split]))
    lines.append(_row("all", scores))
    for split in SPLITS:
        lines += ["", f"## {split.capitalize()} split, per class", "", HEADER]
        groups = defaultdict(list)
        for s in by_split[split]:
            groups[s.label["category"]].append(s)
        for category in sorted(groups):
            lines.append(_row(f"`{category}`", groups[category]))
        lines.append(_row("**all**", by_split[split]))
    lines += ["", "## Misses", "",
              "A log whose action or fault domain is not what its label says, or whose culprit host is not named.",
              "", "| id | split | label (action, category, implicates) | classified (action, category, fault domain) "
              "| missed | source |", "|---|---|---|---|---|---|"]
    for s in sorted(scores, key=lambda s: (SPLITS.index(s.split), s.label["id"])):
        missed = [what for what, bad in (("action", not s.action_right), ("domain", not s.domain_right),
                                         ("culprit", s.culprit_scored and not s.culprit_hit)) if bad]
        if missed:
            lines.append(f"| {s.label['id']} | {s.split} | {s.expected()} | {s.got()} | {', '.join(missed)} "
                         f"| {s.label['source_url']} |")
    lines += ["", "## The corpus", "", "| framework family | logs | development | held-out |", "|---|---:|---:|---:|"]
    families = Counter((_family(s.label["framework"]), s.split) for s in scores)
    for family in sorted({f for f, _ in families}):
        dev, held = families[(family, "development")], families[(family, "held-out")]
        lines.append(f"| {family} | {dev + held} | {dev} | {held} |")
    lines.append(f"| **all** | {len(scores)} | {len(by_split['development'])} | {len(by_split['held-out'])} |")
    return "\n".join(lines) + "\n"


FAMILIES = (("nccl-tests", "NCCL"), ("torchtitan", "torchtitan"), ("nemo", "NeMo"), ("megatron", "Megatron-LM"),
            ("deepspeed", "DeepSpeed"), ("lightning", "Lightning"), ("jax", "JAX"), ("ray", "Ray / RLHF trainers"),
            ("verl", "Ray / RLHF trainers"), ("openrlhf", "Ray / RLHF trainers"),
            ("transformers", "HF Transformers / Trainer"), ("hf trainer", "HF Transformers / Trainer"),
            ("hf trl", "HF Transformers / Trainer"), ("llamafactory", "HF Transformers / Trainer"),
            ("accelerate", "HF Transformers / Trainer"), ("slurm", "Slurm"), ("dcgm", "kernel / driver / DCGM"),
            ("kernel", "kernel / driver / DCGM"), ("dmesg", "kernel / driver / DCGM"),
            ("nvidia driver", "kernel / driver / DCGM"), ("nccl", "NCCL"), ("pytorch", "PyTorch"),
            ("torch", "PyTorch"))


def _family(framework: str) -> str:
    """The label's free-text framework, sorted into one family (the first match in FAMILIES)."""
    text = framework.lower()
    return next((family for key, family in FAMILIES if key in text), "other")


def write_split(corpus: Path = CORPUS) -> list[str]:
    """tests/corpus/heldout.txt from the rule (held_out), over the ids labels.jsonl has; no verdict is read."""
    held = sorted(label["id"] for label in labels(corpus) if held_out(label["id"]))
    (corpus / "heldout.txt").write_text(
        "# The held-out split (README.md, 'Splits'): the ids whose SHA-256 is a multiple of 5. Never tune on them.\n"
        + "".join(f"{label_id}\n" for label_id in held))
    return held


def main(argv: list[str]) -> int:
    if "--split" in argv:
        print(f"{len(write_split())} held-out ids written to {CORPUS / 'heldout.txt'}")
        return 0
    text = render()
    if "--check" in argv:
        old = OUTPUT.read_text() if OUTPUT.is_file() else ""
        if old != text:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       "docs/accuracy.md", "generated"))
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
