#!/usr/bin/env bash
# Regenerates clients/node/src/gen/ from proto/ with buf and ts-proto (both pinned: buf in
# scripts/buf/package-lock.json, ts-proto in clients/node/package-lock.json). Deterministic:
# scripts/check-proto.sh reruns it and fails on any difference from what is committed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
if [ ! -x scripts/buf/node_modules/.bin/buf ] && [ -z "${BUF:-}" ]; then
  (cd scripts/buf && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -x clients/node/node_modules/.bin/protoc-gen-ts_proto ]; then
  # --ignore-scripts: the package's own build (prepare) needs src/gen, which is made here.
  (cd clients/node && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
"${BUF:-$ROOT/scripts/buf/node_modules/.bin/buf}" generate proto --template clients/node/buf.gen.yaml
