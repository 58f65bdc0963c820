"""One verdict for a whole log, as the live detector reaches it (`relaunch classify`): the root cause the
signatures give (classifying.py) and the divergence the progress lines show (progress.replay), and the
choice between them. Pure.

The choice follows what the detector does with a log read as it is written (docs/architecture.md,
"Detection"): a divergence is published as soon as its report is read, a crash as soon as its line is,
and the decider acts on the first anomaly of an attempt. So the one found first in the log wins. A crash
that only a symptom or a teardown explains (cascade) is held back until Slurm reports the job's end,
so a divergence beats it wherever it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .classifying import Classification, Evidence, readable

if TYPE_CHECKING:  # (the parsers are imported only for a log that needs them: offline.py)
    from ..progress.replay import Diverged


def from_divergence(found: Diverged) -> Classification:
    """The divergence as the detector's tracker publishes it (kind divergence, application, stop), with
    the line that reached the verdict as evidence."""
    verdict = found.verdict
    return Classification(
        signature_id=verdict.signature_id, category="divergence", fault_domain="application", action="stop",
        role="cause", cascade=False, summary=verdict.reason, nodes=(), ranks=(),
        evidence=(Evidence(found.index, readable(found.text)),), lines=1, kind="divergence")


def choose(crash: Classification | None, diverged: Diverged | None) -> Classification | None:
    """The log's one verdict. `crash` and `diverged` index their lines alike (line numbers, or positions
    in the same stream)."""
    if diverged is None:
        return crash
    if crash is None or crash.cascade or not crash.evidence or diverged.index <= crash.evidence[0].index:
        return from_divergence(diverged)
    return crash
