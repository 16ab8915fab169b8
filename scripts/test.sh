#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (each starts its own redis-server; the
# integration suite's core runs a second time on a Redis Cluster),
# the alert rules' promtool checks and unit tests, then the Python grpcio suite, which drives
# the built binary as a client in another language would (the sign-up demo and a real
# Prometheus scraping jobwire included), the dashboard's browser tests (tests/ui: Debian's
# chromium driven by Playwright; a screenshot of every page under .ci/artifacts/screenshots/,
# whose path is the last line printed), then every SDK's suite (clients/<lang>/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SCREENSHOTS="$PWD/.ci/artifacts/screenshots"
rm -rf "$SCREENSHOTS"
# Printed last, passed or failed: where the dashboard's screenshots are (if the tests got there).
trap 'if [ -d "$SCREENSHOTS" ]; then echo "== dashboard screenshots (one PNG per page): $SCREENSHOTS/"; fi' EXIT
bash scripts/setup.sh --test
# --workspace: the server and the Rust client SDK (clients/rust, whose tests drive the
# target/debug/jobwire built here).
cargo test --locked --workspace
# The integration suite's core again, each test on its own 3-master Redis Cluster.
JOBWIRE_TEST_REDIS=cluster cargo test --locked --test it -- --skip message_limits:: \
  core_flow:: dead_letters:: replay_once:: retries:: limits:: retention_age:: model:: \
  list_jobs:: list_workers:: functions:: due_later::
promtool check rules helm/jobwire/files/alerts.yaml
(cd tests/alerts && promtool test rules alerts.test.yaml)
cargo build --locked
JOBWIRE_BIN="$PWD/target/debug/jobwire" .venv/bin/python -m pytest -q tests/python
# The dashboard (`serve --ui`) in a real browser: login, every page against what gRPC says,
# replay, purge, the viewer's and CSRF refusals, read-only mode; screenshots to $SCREENSHOTS.
JOBWIRE_BIN="$PWD/target/debug/jobwire" .venv/bin/python -m pytest -q -rxX tests/ui
# Every SDK's linters and tests, including the shared conformance scenarios
# (clients/conformance/scenarios.json), against the binary built above.
for sdk_test in clients/*/test.sh; do
  [ -f "$sdk_test" ] || continue
  echo "== $sdk_test"
  JOBWIRE_BIN="$PWD/target/debug/jobwire" bash "$sdk_test"
done
