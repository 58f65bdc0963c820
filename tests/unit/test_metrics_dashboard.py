"""The metrics every service exposes, and deploy/grafana/relaunch.json over exactly those names.

The registry is prometheus_client's, filled by importing every relaunch module: a PromQL expression
that names a metric (or groups by a label) the code does not define is a dashboard panel that
silently shows nothing, so it fails here instead.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import relaunch
from relaunch.common.schemas import Advice, AnomalyDetected

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "relaunch.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "gauge": ("",), "summary": ("_count", "_sum", "_created")}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def relaunch_metrics() -> dict[str, tuple[str, frozenset[str]]]:
    """Every sample name relaunch's code can expose -> (family, its label names)."""
    for module in pkgutil.walk_packages(relaunch.__path__, "relaunch."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    out = {}
    # prometheus_client has no public way to list metrics with their label names; these attributes
    # have been stable across its releases.
    for collector in set(REGISTRY._names_to_collectors.values()):
        name, kind = getattr(collector, "_name", ""), getattr(collector, "_type", "")
        if not name.startswith("relaunch_"):
            continue
        labels = frozenset(collector._labelnames)
        for suffix in SUFFIXES[kind]:
            out[name + suffix] = (name, labels | ({"le"} if suffix == "_bucket" else set()))
    return out


def expressions() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    panels = [p for top in dash["panels"] for p in [top, *top.get("panels", [])]]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def names_and_labels(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and the label names one PromQL expression uses."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, never names
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors, [$__rate_interval]
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    for matchers in re.findall(r"\{([^}]*)\}", text):
        labels |= set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    text = re.sub(r"\{[^}]*\}", " ", text)
    names = {m.group(1) for m in re.finditer(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", text)}
    return names - KEYWORDS, labels


def test_the_parser_finds_names_and_labels():
    names, labels = names_and_labels(
        'histogram_quantile(0.95, sum by (le, kind) (rate(relaunch_x_bucket{source="log", a!~"b"}[5m]))) * 60')
    assert names == {"relaunch_x_bucket"} and labels == {"le", "kind", "source", "a"}


@pytest.mark.parametrize("expr", expressions())
def test_every_dashboard_expression_uses_metrics_and_labels_the_code_defines(expr):
    metrics = relaunch_metrics()
    names, labels = names_and_labels(expr)
    assert names, f"no metric in {expr!r}"
    unknown = names - set(metrics)
    assert not unknown, f"{expr!r} names {sorted(unknown)}, which no relaunch module registers"
    defined = set().union(*(metrics[n][1] for n in names))
    assert labels <= defined, f"{expr!r} uses labels {sorted(labels - defined)} that {sorted(names)} do not have"


def test_the_dashboard_shows_every_relaunch_metric():
    families = {family for family, _ in relaunch_metrics().values()}
    shown = {relaunch_metrics()[n][0] for e in expressions() for n in names_and_labels(e)[0]}
    assert families - shown == set(), "a metric without a panel in deploy/grafana/relaunch.json"


def test_the_dashboard_is_importable_grafana_json():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "relaunch" and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]


def test_the_issue_s_metrics_exist_with_their_labels():
    metrics = relaunch_metrics()
    want = {
        "relaunch_messages_consumed_total": {"service", "consumer", "outcome"},  # signals consumed
        "relaunch_anomalies_total": {"kind", "category", "source"},
        "relaunch_advice_total": {"operation"},
        "relaunch_reconcile_outcomes_total": {"status", "reason"},
        "relaunch_slurm_command_seconds_bucket": {"command", "le"},
        "relaunch_detection_latency_seconds_bucket": {"kind", "source", "le"},
        "relaunch_time_to_recover_seconds_bucket": {"kind", "le"},
    }
    for name, labels in want.items():
        assert metrics[name][1] == labels, name


def _anomaly(kind="crash", source="log") -> AnomalyDetected:
    return AnomalyDetected(anomaly_id="c.1.0.crash", cluster="c", job_id="1", attempt=0, kind=kind, source=source,
                           signature_id="segfault", category="segfault", fault_domain="application",
                           action="restart", summary="Segmentation fault", detected_at=dt.datetime.now(dt.UTC))


def test_detection_latency_runs_from_the_evidence_to_the_publication():
    from relaunch.detector.metrics import anomaly_published

    def bucket(le: str) -> float:
        return REGISTRY.get_sample_value("relaunch_detection_latency_seconds_bucket",
                                         {"kind": "hang", "source": "progress", "le": le}) or 0.0

    def published() -> float:
        return REGISTRY.get_sample_value("relaunch_anomalies_total",
                                         {"kind": "hang", "category": "segfault", "source": "progress"}) or 0.0

    before_fast, before_slow, before_count = bucket("2.5"), bucket("5.0"), published()
    now = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)
    anomaly_published(_anomaly("hang", "progress"), now - dt.timedelta(seconds=3), now)
    assert bucket("2.5") == before_fast and bucket("5.0") == before_slow + 1
    assert published() == before_count + 1


def test_the_advice_names_the_anomaly_whose_time_to_recover_is_measured():
    from relaunch.actuator.metrics import anomaly_ref

    now = dt.datetime.now(dt.UTC)
    advice = Advice(cluster="c", job_id="1", attempt=0, generation=1, operation="restart", reason="r",
                    evidence_refs=["node:n1:0.9:xid", "anomaly:c.1.0.crash"], issued_at=now, expires_at=now)
    assert anomaly_ref(advice) == "c.1.0.crash"
    assert anomaly_ref(advice.model_copy(update={"evidence_refs": []})) is None


SERVICE_METRICS = {
    "relaunch.detector.main": {"relaunch_messages_consumed", "relaunch_anomalies",
                               "relaunch_detection_latency_seconds", "relaunch_log_lines"},
    "relaunch.decider.main": {"relaunch_messages_consumed", "relaunch_decisions", "relaunch_advice"},
    "relaunch.actuator.main": {"relaunch_messages_consumed", "relaunch_reconcile_outcomes",
                               "relaunch_slurm_command_seconds", "relaunch_time_to_recover_seconds"},
    "relaunch.actuator.watchdog.main": {"relaunch_slurm_command_seconds"},
    "relaunch.gpu_probe.main": {"relaunch_probe_publications", "relaunch_probe_sample_seconds"},
    "relaunch.api.main": {"relaunch_api_requests", "relaunch_api_request_seconds"},
}


@pytest.mark.parametrize("module", sorted(SERVICE_METRICS))
def test_each_service_process_registers_its_metrics(module):
    """What a service's own process serves at /metrics (the registry is per process)."""
    code = (f"import importlib; importlib.import_module({module!r})\n"
            "from prometheus_client import REGISTRY\n"
            "print(' '.join(m.name for m in REGISTRY.collect()))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert SERVICE_METRICS[module] <= set(out.stdout.split())
