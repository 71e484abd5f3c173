"""The Grafana dashboard queries only metrics the service exports, and /metrics exports what it declares."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobservice.http.app import create_app
from jobservice.metrics.collector import FAMILIES
from jobservice.metrics.process import HTTP_FAMILIES
from jobservice.wiring import build_services
from tests.conftest import ROOT, make_settings
from tests.factories import copy_template

DASHBOARD = ROOT / "deploy" / "grafana" / "jobservice.json"
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
# What may appear in a query besides metric names: PromQL functions, keywords and Grafana's helpers.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "irate", "increase", "histogram_quantile",
    "label_values", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "topk", "bottomk",
    "clamp_min", "clamp_max", "abs", "delta", "deriv", "time", "vector", "scalar", "offset", "bool",
}  # fmt: skip


def exported_series() -> set[str]:
    """Every sample name /metrics can carry (a family's name plus its type's suffixes)."""
    kinds = {name: kind for name, (kind, _help, _labels) in FAMILIES.items()}
    kinds.update({name: kind for name, (kind, _labels) in HTTP_FAMILIES.items()})
    return {name + suffix for name, kind in kinds.items() for suffix in SUFFIXES[kind]}


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        found.append(query["query"] if isinstance(query, dict) else query)
    return found


def names_in(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, other bare words) of a PromQL expression."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values and strings
    stripped = re.sub(r"\{[^}]*\}", "", stripped)  # matchers
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # ranges ([$__rate_interval])
    stripped = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", r"\1", stripped)  # grouping labels
    stripped = re.sub(r"^label_values\((\w+),\s*\w+\)$", r"label_values(\1)", stripped.strip())
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped))
    return {w for w in words if w.startswith("jobservice_")}, {
        w for w in words if not w.startswith("jobservice_")
    }


def test_every_dashboard_query_names_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    exprs = queries(dashboard)
    assert len(exprs) >= 15
    used: set[str] = set()
    for expr in exprs:
        metrics, others = names_in(expr)
        assert metrics, f"a query that names no jobservice metric: {expr}"
        assert metrics <= exported, f"{expr}: not exported: {metrics - exported}"
        assert others <= PROMQL_WORDS, f"{expr}: unknown words {others - PROMQL_WORDS}"
        used |= metrics
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("queue", "finished", "reason", "stage", "card", "gate"):
        assert topic in titles, topic
    # The dashboard shows queue, throughput, failures, stage times and cards.
    for family in ("queue_depth", "jobs_finished_total", "qc_failures_total", "job_stage_seconds_bucket"):
        assert f"jobservice_{family}" in used, family


@pytest.mark.parametrize(
    "expr",
    ["max by (model) (rate(jobservice_nope_total[5m]))", "sum(jobservice_queue_depth) + nonsense"],
)
def test_the_checker_catches_unknown_names(expr: str) -> None:
    metrics, others = names_in(expr)
    assert not (metrics <= exported_series() and others <= PROMQL_WORDS)


def test_metrics_exports_every_declared_family(migrated_sqlite: Path, tmp_path: Path) -> None:
    copy_template(migrated_sqlite, tmp_path / "var", "jobservice.db")
    settings = make_settings(tmp_path / "var", broker_url="redis://127.0.0.1:1/0")
    services = build_services(settings)
    try:
        client = create_app(services=services).test_client()
        assert client.get("/healthz").status_code == 200
        response = client.get("/metrics")
        assert response.status_code == 200 and response.mimetype == "text/plain"
        families = {f.name: f.type for f in text_string_to_metric_families(response.get_data(as_text=True))}
    finally:
        services.db.dispose()
    declared = {name: kind for name, (kind, _h, _l) in FAMILIES.items()}
    declared.update({name: kind for name, (kind, _l) in HTTP_FAMILIES.items()})
    assert families == declared
