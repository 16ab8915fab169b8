"""Every metric the shipped alert rules and dashboard query is one jobwire exports.

The exported names come from tests/chart/exported_metrics.txt (one per line), so the list can be
regenerated from a live /metrics. The rules and the dashboard are read from the rendered chart,
i.e. what a user installs.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

import render

from k8s import of_kind

EXPORTED_FILE = Path(__file__).parent / "exported_metrics.txt"
# Series Prometheus makes itself, not jobwire.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "ALERTS", "ALERTS_FOR_STATE"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "and", "or", "unless", "inf", "nan", "Inf", "NaN"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (Grafana variables allowed)."""
    s = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", s):
        name, call = m.group(1), m.group(2)
        if not call and name not in KEYWORDS:
            names.add(name)
    return names


def test_promql_metric_names():
    expr = ('histogram_quantile(0.95, sum by (le, queue) (rate(jobwire_job_run_seconds_bucket'
            '{queue=~"$queue"}[$__rate_interval]))) > 0.5 and on (queue) '
            'max by (queue) (jobwire_queue_jobs{state="dead"} offset 5m) unless up == 0')
    assert promql_metric_names(expr) == {"jobwire_job_run_seconds_bucket", "jobwire_queue_jobs", "up"}


def exported() -> set[str]:
    lines = (l.strip() for l in EXPORTED_FILE.read_text().splitlines())
    return {l for l in lines if l and not l.startswith("#")}


def known(name: str, available: set[str]) -> bool:
    if name in available or name in SYNTHETIC:
        return True
    return any(name.endswith(s) and name[: -len(s)] in available for s in HISTOGRAM_SUFFIXES)


def dashboard_exprs(dashboard: dict) -> list[str]:
    exprs = []

    def walk(panels):
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        if var.get("type") != "query":
            continue
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
        m = m or re.fullmatch(r"\s*query_result\((.*)\)\s*", query)
        assert m, f"dashboard variable {var.get('name')}: unknown query form {query!r}"
        exprs.append(m.group(1))
    return exprs


@pytest.fixture(scope="module")
def shipped(rendered_all):
    docs = rendered_all["all-enabled"]
    (rule,) = of_kind(docs, "PrometheusRule")
    (dashboard_cm,) = [d for d in of_kind(docs, "ConfigMap") if "jobwire.json" in d.get("data", {})]
    return rule["spec"]["groups"], json.loads(dashboard_cm["data"]["jobwire.json"])


def test_rules_and_dashboard_use_only_exported_metrics(shipped):
    groups, dashboard = shipped
    available = exported()
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    used: dict[str, set[str]] = {}
    for g in groups:
        for r in g["rules"]:
            for name in promql_metric_names(r["expr"]):
                used.setdefault(name, set()).add(f"rule {r.get('alert') or r.get('record')}")
    for expr in dashboard_exprs(dashboard):
        for name in promql_metric_names(expr):
            used.setdefault(name, set()).add("dashboard")
    assert len(used) >= 10, f"too few metric names found, is the parser broken? {sorted(used)}"
    unknown = {n: sorted(w) for n, w in used.items() if not known(n, available | recorded)}
    assert not unknown, f"not in {EXPORTED_FILE.name}: {unknown}"


def test_rules_cover_the_design_alerts(shipped):
    groups, _ = shipped
    alerts = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert len(alerts) == len(set(alerts)), "alert names repeat"
    exprs = " ".join(r["expr"] for g in groups for r in g["rules"])
    for metric in ("jobwire_queue_jobs", "jobwire_dead_letter_oldest_age_seconds",
                   "jobwire_queue_oldest_waiting_age_seconds", "jobwire_job_failures_total",
                   "jobwire_workers_connected"):
        assert metric in exprs, f"no alert uses {metric}"
    assert "redis" in exprs, "no alert watches Redis"
    for g in groups:
        for r in g["rules"]:
            if "alert" in r:
                assert r["labels"]["severity"] in ("info", "warning", "critical")
                assert r["labels"]["team"] == "platform", "prometheusRule.alertLabels not applied"


def plain_rules() -> dict:
    return yaml.safe_load((render.CHART / "files" / "alerts.yaml").read_text())


def test_default_render_is_the_plain_rule_file():
    """With no overrides the PrometheusRule carries files/alerts.yaml unchanged (what promtool tests)."""
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    assert render.rule_groups({}) == {"groups": plain_rules()["groups"]}


def test_alert_overrides_apply(shipped):
    groups, _ = shipped
    by_name = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    plain = {r["alert"]: r for g in plain_rules()["groups"] for r in g["rules"] if "alert" in r}
    overrides = render.load_values(render.CI_VALUES["all-enabled"])["prometheusRule"]["alerts"]
    assert overrides, "the all-enabled values override no alert"
    for name, o in overrides.items():
        if o.get("disabled"):
            assert name not in by_name
            continue
        rule = by_name[name]
        if "threshold" in o:
            first = re.search(r"(>=|<=|==|!=|>|<)\s*(-?[0-9.eE+]+)", rule["expr"])
            assert float(first.group(2)) == float(o["threshold"]), rule["expr"]
            before = re.sub(r"(>=|<=|==|!=|>|<)\s*-?[0-9.eE+]+", "CMP", plain[name]["expr"], count=1)
            after = re.sub(r"(>=|<=|==|!=|>|<)\s*-?[0-9.eE+]+", "CMP", rule["expr"], count=1)
            assert before == after, "only the threshold may change"
        assert rule["for"] == o.get("for", plain[name]["for"])
        assert rule["labels"]["severity"] == o.get("severity", plain[name]["labels"]["severity"])


def test_unknown_alert_override_fails_the_render():
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with pytest.raises(Exception, match="JobwireNoSuchAlert"):
        render.render({"insecure": True,
                       "prometheusRule": {"enabled": True, "alerts": {"JobwireNoSuchAlert": {"threshold": 1}}}})
