#!/usr/bin/env bash
# The whole test suite: Rust unit and integration tests (each starts its own redis-server),
# then the Python grpcio suite, which drives the built binary as a client in another
# language would (including the sign-up demo as a test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --locked
cargo build --locked
JOBWIRE_BIN="$PWD/target/debug/jobwire" .venv/bin/python -m pytest -q tests/python
