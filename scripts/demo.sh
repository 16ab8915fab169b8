#!/usr/bin/env bash
# Builds jobwire, starts `jobwire serve` with its embedded Redis (a child redis-server on a
# Unix socket in ./jobwire-data, append-only), waits until it reports SERVING, runs the
# 20-sign-up dead-letter demo against it, and stops the server (SIGTERM, orderly shutdown).
# Exits with the demo's status. Ports: JOBWIRE_GRPC_ADDR (default 127.0.0.1:50051) and
# JOBWIRE_HTTP_ADDR (default 127.0.0.1:9090).
#
# --secure: the same demo over TLS with tokens. Makes a throwaway CA and a server certificate
# for localhost (scripts/dev-certs.sh) and three tokens (`jobwire token new`) in
# jobwire-data/secure/, writes an auth file granting the sign-up API `producer`, the email
# workers `worker` and the on-call person `admin` on the queues signups-*, starts the server
# with --tls-cert, --tls-key and --auth-file, and runs the demo with each part on its own
# token; the demo then also checks that the server refuses what a token's role does not allow.
# Usage: bash scripts/demo.sh [--secure]
set -euo pipefail
cd "$(dirname "$0")/.."
secure=false
case "${1:-}" in
  --secure) secure=true ;;
  "") ;;
  *) echo "usage: bash scripts/demo.sh [--secure]" >&2; exit 64 ;;
esac
bash scripts/setup.sh
cargo build --release --locked
bin="${CARGO_TARGET_DIR:-target}/release/jobwire"
export JOBWIRE_GRPC_ADDR="${JOBWIRE_GRPC_ADDR:-127.0.0.1:50051}"
export JOBWIRE_HTTP_ADDR="${JOBWIRE_HTTP_ADDR:-127.0.0.1:9090}"
mkdir -p jobwire-data && chmod 700 jobwire-data
# The log is the server's own file in the private data dir: 0600 like the rest of it.
(umask 077 && : >jobwire-data/server.log)
serve_args=(--data-dir jobwire-data)
demo_args=(--server "$JOBWIRE_GRPC_ADDR")
ca=""
if $secure; then
  sec=jobwire-data/secure
  bash scripts/dev-certs.sh "$sec"
  hash_of() { sed -n 's/^ *sha256: "\([0-9a-f]*\)"$/\1/p' "$sec/$1.new"; }
  rm -f "$sec"/*.token  # a rerun makes new ones (0600: a redirect would keep an old file's mode)
  for who in signup-api email-worker oncall; do
    (umask 077 && "$bin" token new --id "$who" >"$sec/$who.new" \
      && head -1 "$sec/$who.new" >"$sec/$who.token")
  done
  (umask 077 && cat >"$sec/auth.yaml" <<EOF
# The demo's principals: one token each, roles on the demo's queues only.
principals:
  - name: signup-api
    tokens: [{id: signup-api, sha256: "$(hash_of signup-api)"}]
    grants: [{queues: ["signups-*"], roles: [producer]}]
  - name: email-worker
    tokens: [{id: email-worker, sha256: "$(hash_of email-worker)"}]
    grants: [{queues: ["signups-*"], roles: [worker]}]
  - name: oncall
    tokens: [{id: oncall, sha256: "$(hash_of oncall)"}]
    grants: [{queues: ["signups-*"], roles: [admin]}]
EOF
  )
  rm -f "$sec"/*.new
  serve_args+=(--tls-cert "$sec/server.crt" --tls-key "$sec/server.key" --auth-file "$sec/auth.yaml")
  ca="$sec/ca.crt"
  demo_args+=(--ca "$ca" --producer-token-file "$sec/signup-api.token"
    --worker-token-file "$sec/email-worker.token" --admin-token-file "$sec/oncall.token")
  echo "secure mode: TLS (CA $ca), auth file $sec/auth.yaml, tokens $sec/*.token"
fi
"$bin" serve "${serve_args[@]}" >jobwire-data/server.log 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
.venv/bin/python - "$JOBWIRE_GRPC_ADDR" "$server" "$ca" <<'PY'
import os, sys, time, grpc
import jobwire, jobwire.sync
from grpc_health.v1 import health_pb2, health_pb2_grpc
# Health needs no token; over TLS it needs the CA.
tls = jobwire.TLS(ca=sys.argv[3]) if sys.argv[3] else None
stub = health_pb2_grpc.HealthStub(jobwire.sync.connect(sys.argv[1], tls=tls))
deadline = time.time() + 60
while True:
    try:
        os.kill(int(sys.argv[2]), 0)
    except ProcessLookupError:
        log = open("jobwire-data/server.log").read()[-2000:]
        sys.exit(f"jobwire exited before it was SERVING (port taken? set JOBWIRE_GRPC_ADDR / JOBWIRE_HTTP_ADDR):\n{log}")
    try:
        if stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
            print(f"jobwire is SERVING on {sys.argv[1]}")
            break
    except grpc.RpcError:
        pass
    if time.time() > deadline:
        sys.exit("jobwire did not report SERVING within 60 s; see jobwire-data/server.log")
    time.sleep(0.2)
PY
.venv/bin/python examples/python/signup_demo.py "${demo_args[@]}"
