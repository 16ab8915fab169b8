#!/usr/bin/env bash
# Regenerates the Go code for proto/jobwire/v1 into clients/go/gen/jobwire/v1 (committed;
# scripts/check-proto.sh fails when it is stale). The two plugins are installed at pinned
# versions with `go install` into clients/go/.bin (gitignored), and buf (scripts/buf, npm)
# runs them as `local:` plugins, offline. Changing a version here changes the generated
# headers: regenerate and commit.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
command -v go >/dev/null || { echo "clients/go: the Go toolchain (go 1.26) is not on PATH" >&2; exit 1; }
PROTOC_GEN_GO_VERSION=v1.36.12      # google.golang.org/protobuf, same as go.mod
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2   # google.golang.org/grpc/cmd/protoc-gen-go-grpc
BIN="$ROOT/clients/go/.bin"
mkdir -p "$BIN"
install_plugin() { # name module version
  local stamp="$BIN/.$1.version"
  if [ ! -x "$BIN/$1" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$3" ]; then
    GOBIN="$BIN" GOFLAGS=-mod=mod go install "$2@$3"
    echo "$3" >"$stamp"
  fi
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"
BUF="${BUF:-$ROOT/scripts/buf/node_modules/.bin/buf}"
if [ ! -x "$BUF" ]; then
  (cd scripts/buf && npm ci --no-audit --no-fund --loglevel=error)
fi
rm -rf clients/go/gen
PATH="$BIN:$PATH" "$BUF" generate proto --template clients/go/buf.gen.yaml
