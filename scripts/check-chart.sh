#!/usr/bin/env bash
# Checks the Docker image recipe and the Helm chart with what runs without a Docker engine, a
# helm binary or a cluster:
#   1. hadolint on the Dockerfile;
#   2. the Dockerfile's build stage replayed from a clean copy of the tree
#      (tests/chart/dockerfile_build.py; `--full` runs the real release build, slow);
#   3. helm lint, and the chart rendered with each values file in helm/jobwire/ci/
#      (helm-python-sdk; without it, every template's YAML is only parsed);
#   4. kubernetes-validate --strict on each render (CRDs such as ServiceMonitor only warn);
#   5. yamllint on the renders and the chart's values files (and `promtool check rules` on the
#      rendered alert rules when promtool is installed);
#   6. the chart tests in tests/chart/ (pytest) against target/debug/jobwire.
# Usage: bash scripts/check-chart.sh [--full-docker-build]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
py=.venv/bin/python

if ! $py -c 'import kubernetes_validate, yamllint, jsonschema, yaml' >/dev/null 2>&1 || [ ! -x .venv/bin/hadolint ]; then
  echo "check-chart: installing the chart check packages into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r tests/chart/requirements.txt
fi
if ! $py -c 'import helm_python' >/dev/null 2>&1; then
  .venv/bin/pip install -q --disable-pip-version-check -r tests/chart/requirements-helm.txt \
    || echo "check-chart: WARNING: helm-python-sdk could not be installed; templates are only parsed"
fi

echo "check-chart: hadolint Dockerfile"
.venv/bin/hadolint Dockerfile

echo "check-chart: Dockerfile build stage from a clean copy of HEAD"
if [ "${1:-}" = "--full-docker-build" ]; then
  $py tests/chart/dockerfile_build.py --full
else
  $py tests/chart/dockerfile_build.py
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if $py -c 'import helm_python' >/dev/null 2>&1; then
  for values in helm/jobwire/ci/*-values.yaml; do
    name=$(basename "$values" -values.yaml)
    echo "check-chart: helm lint and render with $values"
    $py tests/chart/render.py lint -f "$values"
    $py tests/chart/render.py manifests -f "$values" >"$out/$name.yaml"
    echo "check-chart: kubernetes-validate --strict ($name)"
    .venv/bin/kubernetes-validate --strict --quiet "$out/$name.yaml"
    # The oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
    .venv/bin/kubernetes-validate --strict --quiet --no-warn -k 1.27.0 "$out/$name.yaml"
  done
  $py tests/chart/render.py rules -f helm/jobwire/ci/default-values.yaml >"$out/rules.yaml"
  # promtool comes with Debian's `prometheus` package (the observability checks install it).
  if command -v promtool >/dev/null 2>&1; then
    echo "check-chart: promtool check rules (the PrometheusRule as a plain rule file)"
    promtool check rules "$out/rules.yaml"
  else
    echo "check-chart: promtool not installed: rule syntax left to the observability checks"
  fi
else
  echo "check-chart: WARNING: helm-python-sdk is missing: parsing templates only, no render, no kubernetes-validate"
  $py tests/chart/render.py parse
fi

echo "check-chart: yamllint"
.venv/bin/yamllint --strict -c tests/chart/yamllint.yaml \
  "$out" helm/jobwire/values.yaml helm/jobwire/Chart.yaml helm/jobwire/ci .hadolint.yaml tests/chart/yamllint.yaml

echo "check-chart: chart tests"
cargo build --locked
JOBWIRE_BIN="$PWD/target/debug/jobwire" $py -m pytest -q tests/chart
