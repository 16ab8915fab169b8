#!/usr/bin/env bash
# The Go SDK's checks: gofmt, go vet, staticcheck (pinned, installed into clients/go/.bin),
# then `go test -race` (the conformance scenarios of clients/conformance/scenarios.json and
# the unit tests, against the real server: $JOBWIRE_BIN, else `jobwire` on PATH), a module
# outside this one that uses the SDK through a `replace` directive, and the sign-up demo.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$HERE"
STATICCHECK_VERSION=v0.7.0   # honnef.co/go/tools
if [ -z "${JOBWIRE_BIN:-}" ] && ! command -v jobwire >/dev/null 2>&1; then
  if [ -x "$ROOT/target/debug/jobwire" ]; then
    export JOBWIRE_BIN="$ROOT/target/debug/jobwire"
  else
    echo "clients/go/test.sh: set JOBWIRE_BIN or put jobwire on PATH (cargo build)" >&2
    exit 1
  fi
fi
export JOBWIRE_BIN="${JOBWIRE_BIN:-$(command -v jobwire)}"
command -v redis-server >/dev/null || { echo "clients/go/test.sh: redis-server is needed (scripts/setup.sh)" >&2; exit 1; }

unformatted="$(gofmt -l . ../../examples/go 2>/dev/null || true)"
if [ -n "$unformatted" ]; then
  echo "gofmt: not formatted:" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "gofmt: ok"
go vet ./...
echo "go vet: ok"
mkdir -p .bin
if [ ! -x .bin/staticcheck ] || [ "$(cat .bin/.staticcheck.version 2>/dev/null)" != "$STATICCHECK_VERSION" ]; then
  GOBIN="$HERE/.bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
  echo "$STATICCHECK_VERSION" >.bin/.staticcheck.version
fi
.bin/staticcheck ./...
echo "staticcheck: ok"

go test -race -count=1 -timeout 15m ./...
