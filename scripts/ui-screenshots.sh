#!/usr/bin/env bash
# Remakes the README's two dashboard pictures, docs/img/ui-overview.png and
# docs/img/ui-dead-letters.png: the browser tests' showcase (tests/ui/test_pages.py) taken at
# the 1280x800 viewport (JOBWIRE_UI_SCREENSHOTS; the full-page CI screenshots go to
# .ci/artifacts/screenshots/ as always). Commit the two files if they changed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
cargo build --locked
JOBWIRE_BIN="$PWD/target/debug/jobwire" JOBWIRE_UI_SCREENSHOTS="$PWD/docs/img" \
  .venv/bin/python -m pytest -q tests/ui/test_pages.py -k "test_overview or test_dead_letter_page"
ls -l docs/img/ui-overview.png docs/img/ui-dead-letters.png
