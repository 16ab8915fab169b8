#!/usr/bin/env bash
# The Python SDK's checks: ruff (lint and format) and mypy --strict on the hand-written code
# (the generated jobwire/_pb is type-checked through its .pyi stubs, not linted), then its
# pytest suite against a real jobwire server (the binary from $JOBWIRE_BIN, else `jobwire` on
# PATH, else target/debug/jobwire): the client, the worker, the test helpers and every scenario
# of clients/conformance/scenarios.json (tests/test_conformance.py fails for a scenario id it
# has no test for), the README examples and the sign-up demo (examples/python/signup_demo.py,
# on this SDK). Installs what it needs into the repository's .venv (quick when there).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
if [ -z "${JOBWIRE_BIN:-}" ]; then
  JOBWIRE_BIN="$(command -v jobwire || echo "$ROOT/target/debug/jobwire")"
  export JOBWIRE_BIN
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
if ! .venv/bin/python - <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
import jobwire, pytest_asyncio, mypy, ruff, mypy_protobuf  # noqa: F401
pins = [l.split("==") for l in open("clients/python/requirements-dev.txt") if "==" in l and not l.startswith("#")]
sys.exit(any(version(n.strip()) != v.strip() for n, v in pins))
PY
then
  echo "clients/python/test.sh: installing the SDK and its dev tools into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r examples/python/requirements.txt \
    -r clients/python/requirements-dev.txt -e ./clients/python
fi
cd clients/python
../../.venv/bin/ruff check src tests tools bench examples
../../.venv/bin/ruff format --check src tests tools bench examples
../../.venv/bin/mypy
../../.venv/bin/python -m pytest -q tests
