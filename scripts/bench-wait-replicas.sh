#!/usr/bin/env bash
# The throughput cost of --redis-wait-replicas (not part of CI).
#
# Builds jobwire (release), starts one Redis master and one replica (real redis-server
# processes on free loopback ports, --save "" --appendonly no) and two `jobwire serve` on
# that master: one plain, one with --redis-wait-replicas 1 (WAIT 1 after every writing
# call). Then, for $ROUNDS rounds, alternating the two servers so both see the same box
# noise, runs
#   jobwire bench --only enqueue,e2e -n $N --e2e $E2E --redis-url <master>
# and prints both tables and the ratio (with WAIT / without) per scenario.
#
# Knobs (environment): ROUNDS (2), N (20000), E2E (1x16,4x64), QUIET_WAIT (2 s),
# STEP_TIMEOUT (600 s per bench call). The scratch dir is kept; processes stop at exit.
# About 3-5 minutes on a 2-core box.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-2}"
N="${N:-20000}"
E2E="${E2E:-1x16,4x64}"
QUIET_WAIT="${QUIET_WAIT:-2}"
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"

command -v redis-server >/dev/null || { echo "redis-server is missing (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
command -v redis-cli >/dev/null || { echo "redis-cli is missing (apt-get install -y redis-tools)" >&2; exit 1; }

SCRATCH="$(mktemp -d /tmp/jobwire-bench-wait.XXXXXX)"
echo "scratch: $SCRATCH" >&2
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

NEXT_PORT=$((20000 + RANDOM % 20000))
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # sets PORT
  while in_use "$NEXT_PORT"; do NEXT_PORT=$((NEXT_PORT + 1)); done
  PORT=$NEXT_PORT
  NEXT_PORT=$((NEXT_PORT + 1))
}

(cd "$ROOT" && cargo build --release --locked --quiet --bin jobwire)
JOBWIRE="$ROOT/target/release/jobwire"

start_redis() { # NAME PORT [redis-server args...]
  local name=$1 port=$2 dir="$SCRATCH/$1"
  shift 2
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    --maxmemory-policy noeviction --logfile "$dir/redis.log" "$@" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server on $port did not start" >&2; exit 1
}

free_port; MASTER=$PORT; start_redis master "$MASTER"
free_port; REPLICA=$PORT; start_redis replica "$REPLICA" --replicaof 127.0.0.1 "$MASTER"
for _ in $(seq 200); do
  redis-cli -p "$REPLICA" info replication | grep -q '^master_link_status:up' && break
  sleep 0.05
done
redis-cli -p "$REPLICA" info replication | grep -q '^master_link_status:up' || { echo "replica not linked" >&2; exit 1; }
URL="redis://127.0.0.1:$MASTER"

declare -A SRV SPID
for name in plain wait1; do
  free_port; grpc=$PORT; free_port; http=$PORT
  extra=()
  [ "$name" = wait1 ] && extra=(--redis-wait-replicas 1)
  RUST_LOG=warn "$JOBWIRE" serve --redis-url "$URL" --grpc-addr "127.0.0.1:$grpc" \
    --http-addr "127.0.0.1:$http" "${extra[@]}" >"$SCRATCH/$name-jobwire.log" 2>&1 &
  SPID[$name]=$!
  PIDS+=("${SPID[$name]}")
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
  SRV[$name]="http://127.0.0.1:$grpc"
done

for round in $(seq "$ROUNDS"); do
  for name in plain wait1; do
    echo "== round $round/$ROUNDS: $name" >&2
    timeout "$STEP_TIMEOUT" "$JOBWIRE" bench --server "${SRV[$name]}" --server-pid "${SPID[$name]}" \
      --redis-url "$URL" --only enqueue,e2e --e2e "$E2E" -n "$N" --runs 1 \
      --quiet-wait "$QUIET_WAIT" --label "$name-r$round" --json "$SCRATCH/$name-r$round.json" \
      >"$SCRATCH/$name-r$round.txt"
  done
done

echo
echo "## --redis-wait-replicas 1 vs 0 ($(nproc) cores, one master + one replica on loopback, N=$N, $ROUNDS round(s))"
echo
python3 - "$SCRATCH" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | scenario | jobs/s without | jobs/s with WAIT 1 | with / without |")
print("|---|---|---:|---:|---:|")
for r in range(1, rounds + 1):
    a = {s["name"]: s["runs"][0]["value"] for s in json.load(open(f"{out}/plain-r{r}.json"))["scenarios"]}
    b = {s["name"]: s["runs"][0]["value"] for s in json.load(open(f"{out}/wait1-r{r}.json"))["scenarios"]}
    for name in a:
        if name in b and a[name]:
            print(f"| {r} | {name} | {a[name]:,.0f} | {b[name]:,.0f} | {b[name] / a[name]:.2f} |")
PY
