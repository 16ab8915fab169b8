"""Renders the jobwire chart offline, for the chart checks and for people.

With PyPI `helm-python-sdk` (Helm's own library: the same output as `helm template`, including
values.schema.json validation) the chart is rendered for real. If that package is missing, the
fallback can only parse: it blanks out every template action and checks that what is left of
each template is YAML, which catches indentation and syntax slips but not wrong values.

CLI:
  render.py manifests [-f VALUES]...   print the rendered manifests (a multi-document stream)
  render.py rules [-f VALUES]...       print the PrometheusRule's groups as a plain Prometheus
                                       rule file (for promtool)
  render.py lint [-f VALUES]...        helm lint (strict); exit 1 on errors
  render.py parse                      the fallback's parse of every template
"""

import argparse
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "jobwire"
CI_VALUES = {
    "defaults": CHART / "ci" / "default-values.yaml",
    "all-enabled": CHART / "ci" / "all-enabled-values.yaml",
    "external-cluster": CHART / "ci" / "external-cluster-values.yaml",
    "external-cluster-tls": CHART / "ci" / "external-cluster-tls-values.yaml",
    "external-sentinel": CHART / "ci" / "external-sentinel-values.yaml",
    "secure": CHART / "ci" / "secure-values.yaml",
}
RELEASE = "jobwire"
NAMESPACE = "jobwire"

try:
    import helm_python as helm
except ImportError:  # the fallback below
    helm = None


def have_helm() -> bool:
    return helm is not None


def load_values(*files) -> dict:
    """Merges values files left to right, as `helm template -f a -f b` does."""
    merged: dict = {}
    for f in files:
        merged = _merge(merged, yaml.safe_load(Path(f).read_text()) or {})
    return merged


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def render(values: dict | None = None) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included). Raises on schema or template errors."""
    if helm is None:
        raise RuntimeError("helm-python-sdk is not installed; only `render.py parse` works")
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


def manifests(values: dict | None = None) -> list[dict]:
    """The rendered Kubernetes objects, in template order."""
    docs = []
    for path, text in sorted(render(values).items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def manifest_stream(values: dict | None = None) -> str:
    parts = []
    for path, text in sorted(render(values).items()):
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        parts.append(f"---\n# Source: {path}\n{text.strip()}\n")
    return "".join(parts)


def rule_groups(values: dict | None = None) -> dict:
    """{'groups': [...]} of the PrometheusRule rendered with `values` (rules switched on). The
    rules do not depend on authentication: without an auth file in `values`, `insecure` is set
    so that the render does not stop at the chart's auth-or-insecure check."""
    values = _merge(values or {}, {"prometheusRule": {"enabled": True}})
    auth = values.get("auth") or {}
    if not (auth.get("config") or (auth.get("existingSecret") or {}).get("name")):
        values["insecure"] = True
    for doc in manifests(values):
        if doc["kind"] == "PrometheusRule":
            return {"groups": doc["spec"]["groups"]}
    raise RuntimeError("no PrometheusRule rendered")


def lint(values: dict | None = None) -> list[str]:
    """helm lint --strict findings of severity warning or worse, as text."""
    report = helm.lint(str(CHART), values or {}, strict=True, namespace=NAMESPACE)
    found = [f"{m.get('path')}: {m.get('error')}" for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    return found + list(report.get("errors") or [])


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (PromQL) as `|` blocks, as people write rule files."""


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


# === the fallback: parse templates without Helm ===

_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", re.S)
_ACTION = re.compile(r"\{\{-?.*?-?\}\}", re.S)
_CONTROL = re.compile(r"^\s*\{\{-?\s*(if|else|end|with|range|define|include|toYaml|tpl|fail|\$)[^}]*\}\}\s*$")


def parse_templates() -> list[str]:
    """Parses every template with its actions blanked; returns the problems found."""
    problems = []
    for path in sorted((CHART / "templates").glob("*.yaml")):
        text = _COMMENT.sub("", path.read_text())
        lines = []
        for line in text.splitlines():
            if _CONTROL.match(line):
                continue  # a control line, or an include that adds whole lines
            lines.append(_ACTION.sub("TEMPLATED", line))
        try:
            list(yaml.safe_load_all("\n".join(lines)))
        except yaml.YAMLError as e:
            problems.append(f"{path.relative_to(REPO)}: {e}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["manifests", "rules", "lint", "parse"])
    parser.add_argument("-f", "--values", action="append", default=[], help="values file (repeatable)")
    args = parser.parse_args()
    if args.what == "parse":
        problems = parse_templates()
        print("\n".join(problems) or f"parsed {len(list((CHART / 'templates').glob('*.yaml')))} templates")
        return 1 if problems else 0
    values = load_values(*args.values)
    if args.what == "manifests":
        sys.stdout.write(manifest_stream(values))
    elif args.what == "rules":
        sys.stdout.write(yaml.dump(rule_groups(values), Dumper=_BlockDumper, sort_keys=False, width=120))
    else:
        problems = lint(values)
        print("\n".join(problems) or "lint: no findings")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
