#!/usr/bin/env bash
# Builds jobwire, starts `jobwire serve` with its embedded Redis (a child redis-server on a
# Unix socket in ./jobwire-data, append-only), waits until it reports SERVING, runs the
# 20-sign-up dead-letter demo against it, and stops the server (SIGTERM, orderly shutdown).
# Exits with the demo's status. Ports: JOBWIRE_GRPC_ADDR (default 127.0.0.1:50051) and
# JOBWIRE_HTTP_ADDR (default 127.0.0.1:9090).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked
export JOBWIRE_GRPC_ADDR="${JOBWIRE_GRPC_ADDR:-127.0.0.1:50051}"
export JOBWIRE_HTTP_ADDR="${JOBWIRE_HTTP_ADDR:-127.0.0.1:9090}"
mkdir -p jobwire-data && chmod 700 jobwire-data
# The log is the server's own file in the private data dir: 0600 like the rest of it.
(umask 077 && : >jobwire-data/server.log)
./target/release/jobwire serve --data-dir jobwire-data >jobwire-data/server.log 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
.venv/bin/python - "$JOBWIRE_GRPC_ADDR" "$server" <<'PY'
import os, sys, time, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(sys.argv[1]))
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
.venv/bin/python examples/python/signup_demo.py --server "$JOBWIRE_GRPC_ADDR"
