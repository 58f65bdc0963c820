"""One verdict (issue 36, item 2): every corpus log (tests/corpus, see test_decider_corpus.py) and the
issue's own examples go through `relaunch classify --json` and through the live detector's handler
(Detector.on_log, in process: its ProgressTracker, crash classification and publisher, with the hot state
in memory), batch by batch as the follower cuts a file; the verdicts must be the same. The live verdict is
the first anomaly published for the attempt (the decider acts on it), else the cascade candidate held for
Slurm's report of the job's end.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from relaunch.client.cli import app
from relaunch.common.diagnosis.blocks import MAX_LINE_BYTES
from relaunch.common.diagnosis.signatures import builtin_catalogue
from relaunch.common.schemas import AnomalyDetected, LogBatch
from relaunch.detector.domain import hangs, stragglers
from relaunch.detector.domain.track import decode_record
from relaunch.detector.handlers import Detector
from relaunch.detector.tracking import ProgressTracker

CORPUS = Path(os.environ.get("RELAUNCH_CORPUS", Path(__file__).resolve().parents[1] / "corpus"))
T0 = dt.datetime(2026, 12, 4, 10, 0, tzinfo=dt.UTC)
BATCH_BYTES = 256 * 1024
"""The detector's default batch_bytes (settings.py)."""


class HotStateInMemory:
    """What Detector._on_log and ProgressTracker._observe ask of HotState (adapters/hotstate.py), in a dict."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], dict[str, str]] = {}
        self.states: dict[tuple[str, str], bytes | dict] = {}
        self.anomalies: set[tuple[str, str, int, str]] = set()
        self.candidates: dict[tuple[str, str, int], str] = {}

    async def job(self, cluster, job_id):
        return dict(self.jobs.get((cluster, job_id), {}))

    async def track(self, cluster, job_id, fields, forget_progress=False):
        self.jobs.setdefault((cluster, job_id), {}).update(fields)

    async def progress(self, cluster, job_id):
        data = self.states.get((cluster, job_id))
        return decode_record(data) if isinstance(data, bytes) else data

    async def save_progress(self, cluster, job_id, data, deadline):
        self.states[(cluster, job_id)] = data
        return "t+0"

    async def has_anomaly(self, cluster, job_id, attempt, kinds=("crash", "hang")):
        return any((cluster, job_id, attempt, kind) in self.anomalies for kind in kinds)

    async def crash_context(self, cluster, job_id, attempt):
        return (await self.job(cluster, job_id), await self.has_anomaly(cluster, job_id, attempt),
                await self.progress(cluster, job_id))

    async def set_candidate(self, cluster, job_id, attempt, anomaly_json):
        self.candidates.setdefault((cluster, job_id, attempt), anomaly_json)

    async def mark_anomaly(self, cluster, job_id, attempt, kind, signature_id):
        self.anomalies.add((cluster, job_id, attempt, kind))


class Published:
    def __init__(self, state: HotStateInMemory) -> None:
        self.state, self.anomalies = state, []

    async def publish(self, anomaly: AnomalyDetected, evidence_at: dt.datetime) -> None:
        self.anomalies.append(anomaly)
        await self.state.mark_anomaly(anomaly.cluster, anomaly.job_id, anomaly.attempt, anomaly.kind,
                                      anomaly.signature_id)


def follower_batches(text: str) -> list[list[str]]:
    """The lines as the follower reads a file (adapters/logfiles.py): a line ends at '\\n' or '\\r', empty
    frames are dropped, each line is cut at MAX_LINE_BYTES; batches under the detector's batch_bytes."""
    lines = [raw.encode()[:MAX_LINE_BYTES].decode("utf-8", "replace") for raw in re.split(r"\r\n|\r|\n", text) if raw]
    batches, size = [[]], 0
    for line in lines:
        if batches[-1] and size + len(line.encode()) + 1 > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(line)
        size += len(line.encode()) + 1
    return batches


async def live_verdict(text: str, per_line: bool = False) -> dict | None:
    """`per_line`: one batch per line, as a log being written is read (time order); else the follower's
    batches of a file read at once."""
    state = HotStateInMemory()
    published = Published(state)
    tracker = ProgressTracker(None, state, "c", hangs.HangPolicy(), stragglers.StragglerPolicy(), anomalies=published)
    detector = Detector(None, state, None, builtin_catalogue(), grace_s=0, tracker=tracker, anomalies=published)
    await state.track("c", "1", {"attempt": "0", "nodes": '["node1"]', "state": "RUNNING"})
    offset = 0
    batches = follower_batches(text)
    for i, lines in enumerate([[line] for batch in batches for line in batch] if per_line else batches):
        await detector.on_log(LogBatch(cluster="c", job_id="1", attempt=0, path="/jobs/1.out", offset=offset,
                                       lines=lines, read_at=T0 + dt.timedelta(seconds=i)), None)
        offset += sum(len(line.encode()) + 1 for line in lines)
    first = published.anomalies[0] if published.anomalies else None
    if first is None and (held := state.candidates.get(("c", "1", 0))):
        first = AnomalyDetected.model_validate_json(held)
    if first is None:
        return None
    return {"kind": first.kind, "signature": first.signature_id, "category": first.category,
            "fault_domain": first.fault_domain, "action": first.action, "ranks": first.ranks}


def offline_verdicts(paths: list[Path]) -> dict[str, dict | None]:
    result = CliRunner().invoke(app, ["classify", "--json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    out = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        found = record["anomaly"]
        out[record["file"]] = found and {k: found[k] for k in
                                         ("kind", "signature", "category", "fault_domain", "action", "ranks")}
    return out


def _corpus() -> list[Path]:
    return sorted((CORPUS / "logs").glob("*.log")) if (CORPUS / "labels.jsonl").is_file() else []


@pytest.fixture(scope="module")
def offline_corpus() -> dict[str, dict | None]:
    return offline_verdicts(_corpus())


@pytest.mark.skipif(not _corpus(), reason=f"no corpus at {CORPUS} (set RELAUNCH_CORPUS)")
@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.stem)
async def test_classify_and_the_live_detector_give_one_verdict_on_every_corpus_log(path, offline_corpus):
    live = await live_verdict(path.read_bytes().decode("utf-8", "replace"))
    assert offline_corpus[str(path)] == live


HF = "{{'loss': {0}, 'grad_norm': {1}, 'learning_rate': 1e-05, 'epoch': 0.{2}}}"
DS_OVERFLOW = ("[2026-12-04 05:12:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
               "Skipping step. Attempted loss scale: {0}, reducing to {1}")
DS_STEP = "[2026-12-04 01:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={0}, skipped={1}, lr=[2.9e-05]"
TRACEBACK = ("Traceback (most recent call last):\n  File \"train.py\", line 3\n"
             "ModuleNotFoundError: No module named 'x'\n")


def _storm() -> str:
    scale, lines = 65536, []
    for _ in range(10):
        lines.append(DS_OVERFLOW.format(scale, scale // 2))
        scale //= 2
    lines += [DS_STEP.format(step, 10) for step in range(10, 3000, 10)]
    for k, scale in enumerate((64, 32, 16, 8, 4)):
        lines += [DS_OVERFLOW.format(scale, scale // 2), DS_STEP.format(3000 + 10 * k, 11 + k)]
    return "\n".join(lines) + "\n"


EXAMPLES = {
    "srun around torchrun": "".join(f"15: [rank15]: {line}\n" for line in TRACEBACK.splitlines()),
    "torchrun --tee under srun": "".join(f"0: [default3]:{line}\n" for line in TRACEBACK.splitlines()),
    "Ray Train worker": "".join(f"(RayTrainWorker pid=1234, ip=10.0.0.5) {line}\n" for line in TRACEBACK.splitlines()),
    "records joined on one line": "2026-12-04 10:00:00,123 INFO trainer: step 9 [rank7]: AssertionError: bad\n",
    "HF metrics, NaN grad norm": "".join(HF.format(0.0, "nan", i) + "\n" for i in range(1, 5)),
    "late overflow storm": _storm(),
    "divergence, then an error": "".join(HF.format(0.0, "nan", i) + "\n" for i in range(1, 5)) + TRACEBACK,
    "an error, then divergence": TRACEBACK + "".join(HF.format(0.0, "nan", i) + "\n" for i in range(1, 5)),
    "a symptom, then divergence": ("[rank3]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8) ran "
                                   "for 600043 milliseconds before timing out.\n"
                                   + "".join(HF.format(0.0, "nan", i) + "\n" for i in range(1, 5))),
}
EXPECTED = {
    "srun around torchrun": ("crash", "python_application_error", "stop"),
    "torchrun --tee under srun": ("crash", "python_application_error", "stop"),
    "Ray Train worker": ("crash", "python_application_error", "stop"),
    "records joined on one line": ("crash", "python_application_error", "stop"),
    "HF metrics, NaN grad norm": ("divergence", "divergence_nonfinite", "stop"),
    "late overflow storm": ("divergence", "divergence_loss_scale", "stop"),
    "divergence, then an error": ("divergence", "divergence_nonfinite", "stop"),
    "an error, then divergence": ("crash", "python_application_error", "stop"),
    "a symptom, then divergence": ("divergence", "divergence_nonfinite", "stop"),
}


@pytest.mark.parametrize("name", EXAMPLES)
async def test_the_issue_examples_give_one_verdict_offline_and_live(name, tmp_path):
    path = tmp_path / "example.log"
    path.write_text(EXAMPLES[name])
    offline = offline_verdicts([path])[str(path)]
    assert offline is not None and (offline["kind"], offline["signature"], offline["action"]) == EXPECTED[name]
    # Live, the lines arrive as they are written: one batch per line, so the first found is published first.
    assert await live_verdict(EXAMPLES[name], per_line=True) == offline
