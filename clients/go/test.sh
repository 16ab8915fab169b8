#!/usr/bin/env bash
# The Go SDK's checks: gofmt, go vet, staticcheck (pinned, installed into clients/go/.bin),
# then `go test -race` (the conformance scenarios of clients/conformance/scenarios.json and
# the unit tests, against the real server: $JOBWIRE_BIN, else `jobwire` on PATH), a module
# outside this one that uses the SDK through a `replace` directive, and the sign-up demo.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$HERE"
command -v go >/dev/null || { echo "clients/go: the Go toolchain (go 1.26) is not on PATH" >&2; exit 1; }
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

# The sign-up demo: a module of its own (examples/go/signup) that uses this SDK through a
# `replace` directive, as a user's module would, run against a fresh server on free ports.
DEMO="$ROOT/examples/go/signup"
(cd "$DEMO" && go vet ./... && "$HERE/.bin/staticcheck" ./... && go build -o "$HERE/.bin/signup-demo" .)
tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
ports="$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')"
read -r grpc_port http_port <<<"$ports"
"$JOBWIRE_BIN" serve --grpc-addr "127.0.0.1:$grpc_port" --http-addr "127.0.0.1:$http_port" \
  --data-dir "$tmp/data" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 150); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$grpc_port") 2>/dev/null; then break; fi
  sleep 0.2
done
if ! "$HERE/.bin/signup-demo" -server "127.0.0.1:$grpc_port"; then
  echo "the Go sign-up demo failed; server log:" >&2
  tail -50 "$tmp/server.log" >&2
  exit 1
fi
