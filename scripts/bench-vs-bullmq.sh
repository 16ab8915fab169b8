#!/usr/bin/env bash
# jobwire vs BullMQ on the same box and the same Redis, in one run (not part of CI).
#
# Copies ../shared/bench (the BullMQ harness) to a scratch dir, runs `npm ci` there, starts
# ONE redis-server on $PORT (--save "" --appendonly no), builds and starts `jobwire serve`
# (release) against it, then alternates: BullMQ harness run 1, jobwire bench run 1, BullMQ
# run 2, ... and prints
#   - both tables and the jobwire/BullMQ ratio per scenario (report.mjs --compare);
#   - Redis bytes per waiting job (100-byte payload), from INFO memory before/after
#     filling $FILL jobs, for both;
#   - Redis CPU µs per job lifecycle (enqueue in batches + lease/fetch + ack/complete) and
#     the server's (Node's) own CPU µs per job, for both;
#   - the floors under jobwire's one-job rows against BullMQ's: a bare gRPC health check
#     through the server (one at a time, 50 in flight) and a bare Redis PING, measured in
#     jobwire's runs (`jobwire bench --only rtt`).
#
# With a Redis Cluster URL as the argument, both run on that cluster instead of a private Redis:
#   bash scripts/bench-vs-bullmq.sh redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
# The cluster must run on this box (loopback seeds, no password, no TLS): the Redis CPU columns
# sum the CPU of every master (pids from INFO server). jobwire gets the URL as --redis-url and
# spreads its queues over the masters by slot; BullMQ runs with the prefix `{bull}` (its
# keys of a queue must share a slot), so all of it lives on one master
# (scripts/bullmq-on-cluster.mjs patches the scratch copy of the harness). Every FLUSHDB goes
# to every master, and the cluster is emptied (FLUSHALL) between steps: use a throw-away one.
# The README, "Benchmark", shows how to start a local 3-master cluster.
#
# Then, unless EXTRA=0, the scenarios the harness does not have (issue 17), side by side where
# BullMQ can run them (scripts/bullmq-extra.mjs; not on a cluster):
#   - fixed rate: RATES jobs/s (100,1000,5000) of one-job enqueues for RATE_SECS (10) each,
#     enqueue->lease and enqueue->ack p50/p95/p99 and CPU per job (Hatchet's load-test shape);
#   - drain: DRAIN_JOBS (1,000,000) pre-filled jobs, Redis memory before, full and after
#     (River's benchmark shape);
#   and for jobwire alone the same with JW_GROUPS (1000) group keys, and with TLS + bearer
#   tokens on (a second server with scripts/dev-certs.sh certificates and an auth file),
#   with its enqueue, end-to-end and latency scenarios too.
#
# Knobs (environment): BULLMQ_HARNESS (../shared/bench), RUNS (1), N (50000), FILL (100000), PORT (6390), GRPC_PORT (50151),
# QUIET_WAIT (5 s before each measurement), RETRIES (0), E2E (jobwire worker configs), EXTRA (1),
# RATES, RATE_SECS, DRAIN_JOBS, JW_GROUPS, JOBWIRE_BIN (a jobwire binary to use instead of
# building the release one), JW_WORKER_THREADS (1: the async runtime threads of the jobwire
# server and of `jobwire bench`, as JOBWIRE_WORKER_THREADS; empty: one per CPU). One thread
# each is the like-for-like setting: BullMQ's harness runs its producers and workers in one
# single-threaded Node process, and Redis shares the same cores.
# The default finishes in about 15-20 minutes on a 2-core box (5-8 without the extras).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="${BULLMQ_HARNESS:-$ROOT/../shared/bench}"
RUNS="${RUNS:-1}"
N="${N:-50000}"
FILL="${FILL:-100000}"
PORT="${PORT:-6390}"
GRPC_PORT="${GRPC_PORT:-50151}"
HTTP_PORT="${HTTP_PORT:-$((GRPC_PORT + 1))}"
QUIET_WAIT="${QUIET_WAIT:-5}"
RETRIES="${RETRIES:-0}"
E2E="${E2E:-1x1,1x16,1x100,4x64,2x256}"
STEP_TIMEOUT="${STEP_TIMEOUT:-900}"
EXTRA="${EXTRA:-1}"
RATES="${RATES:-100,1000,5000}"
RATE_SECS="${RATE_SECS:-10}"
DRAIN_JOBS="${DRAIN_JOBS:-1000000}"
JW_GROUPS="${JW_GROUPS:-1000}"

REDIS_URL="${1:-}"
MASTERS=""  # host:port of every master, comma-separated (cluster runs only)
if [ -n "$REDIS_URL" ]; then
  case "$REDIS_URL" in
    redis+cluster://*) SEEDS="${REDIS_URL#redis+cluster://}" ;;
    *) echo "usage: $0 [redis+cluster://HOST:PORT,...] (a local Redis Cluster; without it a private Redis on \$PORT)" >&2; exit 2 ;;
  esac
  case "$SEEDS" in
    *@* | */* | *\?*) echo "the cluster URL must be host:port seeds only (no password, path or options): $REDIS_URL" >&2; exit 2 ;;
  esac
  SEED="${SEEDS%%,*}"
  # CLUSTER NODES lines: <id> <ip:port@bus[,hostname]> <flags> ...; the masters not failed.
  MASTERS=$(redis-cli -h "${SEED%:*}" -p "${SEED##*:}" cluster nodes \
    | awk '$3 ~ /master/ && $3 !~ /fail/ { split($2, a, "@"); print a[1] }' | sort | paste -sd, -)
  [ -n "$MASTERS" ] || { echo "no master found through $SEED (is it a Redis Cluster?)" >&2; exit 1; }
fi
# redis-cli on the private Redis, or on every master of the cluster.
each_redis() {
  if [ -z "$MASTERS" ]; then redis-cli -p "$PORT" "$@"; return; fi
  local m
  for m in ${MASTERS//,/ }; do redis-cli -h "${m%:*}" -p "${m##*:}" "$@"; done
}

[ -d "$SRC/bullmq" ] || { echo "no BullMQ harness at $SRC" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is missing (apt-get install -y redis-server)" >&2; exit 1; }
command -v node >/dev/null || { echo "node is missing" >&2; exit 1; }
if [ -z "$MASTERS" ] && redis-cli -p "$PORT" ping >/dev/null 2>&1; then
  echo "something already answers on port $PORT; set PORT=..." >&2; exit 1
fi

JW_WORKER_THREADS="${JW_WORKER_THREADS-1}"
if [ -n "$JW_WORKER_THREADS" ]; then
  export JOBWIRE_WORKER_THREADS="$JW_WORKER_THREADS"
else
  unset JOBWIRE_WORKER_THREADS
fi
echo "jobwire worker threads (server and bench client): ${JW_WORKER_THREADS:-one per CPU}"

SCRATCH="$(mktemp -d /tmp/jobwire-vs-bullmq.XXXXXX)"
cp -r "$SRC" "$SCRATCH/bench"
chmod -R u+w "$SCRATCH/bench"
B="$SCRATCH/bench/bullmq"
OUT="$SCRATCH/out"
mkdir -p "$OUT"
echo "scratch: $SCRATCH"

SERVER_PID=""
TLS_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true
  [ -n "$TLS_PID" ] && kill "$TLS_PID" 2>/dev/null && wait "$TLS_PID" 2>/dev/null || true
  if [ -f "$SCRATCH/bench/redis.pid" ]; then kill "$(cat "$SCRATCH/bench/redis.pid")" 2>/dev/null || true; fi
}
trap cleanup EXIT

(cd "$B" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
if [ -n "$MASTERS" ]; then node "$ROOT/scripts/bullmq-on-cluster.mjs" "$B/bench.mjs"; fi
if [ -n "${JOBWIRE_BIN:-}" ]; then
  JOBWIRE="$JOBWIRE_BIN"
else
  (cd "$ROOT" && cargo build --release --locked --quiet)
  JOBWIRE="${CARGO_TARGET_DIR:-$ROOT/target}/release/jobwire"
fi

if [ -z "$MASTERS" ]; then
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --pidfile "$SCRATCH/bench/redis.pid" --logfile "$SCRATCH/redis.log" --maxmemory-policy noeviction
  for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  for _ in $(seq 50); do [ -s "$SCRATCH/bench/redis.pid" ] && break; sleep 0.1; done
  # jobwire uses db 1: the harness FLUSHDBs db 0 before each of its scenarios.
  JOBWIRE_URL="redis://127.0.0.1:$PORT/1"
else
  # The masters' pids, one per line (the patched harness sums them). cleanup() stops only the
  # private Redis (redis.pid), never the cluster.
  each_redis info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p' >"$SCRATCH/bench/cluster.pids"
  for p in $(cat "$SCRATCH/bench/cluster.pids"); do
    [ -d "/proc/$p" ] || { echo "master pid $p is not on this box: run the cluster locally" >&2; exit 1; }
  done
  # A cluster has only db 0: the harness's FLUSHDB also empties jobwire's keys, so each side
  # starts from an empty cluster (as each jobwire run starts from an empty db 1 otherwise).
  JOBWIRE_URL="$REDIS_URL"
fi
REDIS_PIDS="$(cat "$SCRATCH/bench/redis.pid" 2>/dev/null || cat "$SCRATCH/bench/cluster.pids")"
PIDFILE="$SCRATCH/bench/redis.pid"
[ -z "$MASTERS" ] || PIDFILE="$SCRATCH/bench/cluster.pids"

# Waits up to 10 s for a jobwire's /readyz on HTTP port $1; shows its log $2 and exits if not.
wait_ready() {
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0; sleep 0.1
  done
  echo "jobwire (HTTP port $1) did not become ready" >&2; cat "$2" >&2; exit 1
}

RUST_LOG=warn "$JOBWIRE" serve --redis-url "$JOBWIRE_URL" \
  --grpc-addr "127.0.0.1:$GRPC_PORT" --http-addr "127.0.0.1:$HTTP_PORT" \
  >"$SCRATCH/jobwire.log" 2>&1 &
SERVER_PID=$!
wait_ready "$HTTP_PORT" "$SCRATCH/jobwire.log"

bench_jobwire() { # extra args...
  timeout "$STEP_TIMEOUT" "$JOBWIRE" bench --server "http://127.0.0.1:$GRPC_PORT" \
    --server-pid "$SERVER_PID" $(printf -- '--redis-pid %s ' $REDIS_PIDS) --quiet-wait "$QUIET_WAIT" \
    --retries "$RETRIES" "$@"
}

for run in $(seq "$RUNS"); do
  echo "== run $run/$RUNS: BullMQ" >&2
  (cd "$B" && BENCH_CLUSTER_NODES="$MASTERS" timeout "$STEP_TIMEOUT" node bench.mjs --runs 1 --n "$N" \
    --label "run$run" --port "$PORT" --pidfile "$PIDFILE" --quiet-wait "$QUIET_WAIT" --retries "$RETRIES" >/dev/null)
  cp "$B/results/bullmq-run$run.json" "$OUT/bullmq-run$run.json"
  echo "== run $run/$RUNS: jobwire" >&2
  if [ -z "$MASTERS" ]; then redis-cli -p "$PORT" -n 1 flushdb >/dev/null; else each_redis flushall >/dev/null; fi
  # --redis-url: the e2e rows report Redis's used_memory after the drain (usedMemoryMB), as
  # the harness's do (without it the BullMQ report prints NaN MB for jobwire).
  # rtt: the floors under a unary call per job (a bare health check one at a time and 50 in
  # flight, a bare Redis PING), measured between the same BullMQ runs.
  bench_jobwire --only enqueue,e2e,latency,failure,rtt --runs 1 -n "$N" --in-flight 50 \
    --e2e "$E2E" --with-retry-policy --redis-url "$JOBWIRE_URL" --label "run$run" \
    --json "$OUT/jobwire-run$run.json" >/dev/null
done

# Merge the runs of each system into one document (runs side by side, as the harness does).
merge() { # prefix -> file
  node -e '
    const fs = require("fs");
    const docs = process.argv.slice(1).map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
    const out = { meta: { ...docs[0].meta, runs: docs.length, label: "merged" }, scenarios: [] };
    for (const d of docs) for (const s of d.scenarios) {
      let t = out.scenarios.find((x) => x.name === s.name);
      if (!t) out.scenarios.push(t = { name: s.name, unit: s.unit, runs: [] });
      t.runs.push(...s.runs);
    }
    out.meta.title = (out.meta.title || "").replace(/median of \d+ run(\(s\)|s)?/, `median of ${docs.length} run(s)`);
    console.log(JSON.stringify(out, null, 2));' "$OUT/$1"-run*.json >"$OUT/$1.json"
}
merge bullmq
merge jobwire

# Redis bytes per waiting job, 100-byte payload.
# (Summed over the masters on a cluster.)
used() { each_redis info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p' | tr -d '\r' | awk '{ s += $1 } END { print s }'; }
each_redis flushall >/dev/null; sleep 1
m0=$(used)
(cd "$B" && BENCH_CLUSTER_NODES="$MASTERS" node --input-type=module -e "
  import { Queue } from 'bullmq';
  import { Cluster } from 'ioredis';
  const nodes = process.env.BENCH_CLUSTER_NODES.split(',').filter(Boolean)
    .map((a) => ({ host: a.slice(0, a.lastIndexOf(':')), port: +a.slice(a.lastIndexOf(':') + 1) }));
  const cluster = nodes.length ? new Cluster(nodes) : null;
  const q = new Queue('mem', cluster ? { connection: cluster, prefix: '{bull}' }
    : { connection: { host: '127.0.0.1', port: $PORT } });
  const data = { p: 'x'.repeat(92) }; // JSON of 100 bytes
  for (let i = 0; i < $FILL; i += 1000) {
    await q.addBulk(Array.from({ length: Math.min(1000, $FILL - i) }, () => ({ name: 'j', data })));
  }
  console.error('bullmq waiting:', await q.getWaitingCount());
  await q.close();
  if (cluster) await cluster.quit();")
sleep 1; m1=$(used)
each_redis flushall >/dev/null; sleep 1
m2=$(used)
bench_jobwire --only fill -n "$FILL" --payload 100 --queues 1 >/dev/null
sleep 1; m3=$(used)
each_redis flushall >/dev/null

RSS_TABLE=$(bench_jobwire --only rss --rss-streams 1000 --rss-credits 10 --payload 100)

echo
echo "## BullMQ (this run)"
node "$B/report.mjs" "$OUT/bullmq.json"
echo "## jobwire (this run; node CPU = jobwire server CPU)"
node "$B/report.mjs" "$OUT/jobwire.json"
echo "## jobwire / BullMQ"
node "$B/report.mjs" --compare "$OUT/bullmq.json" "$OUT/jobwire.json"
echo
echo "## Floors: jobwire's hop alone on this box, against BullMQ (medians of this run)"
node --input-type=module -e "
  import { readFileSync } from 'node:fs';
  const load = (f) => JSON.parse(readFileSync(f, 'utf8'));
  const med = (xs) => { const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
  const b = load('$OUT/bullmq.json'), j = load('$OUT/jobwire.json');
  const val = (doc, name) => { const s = doc.scenarios.find((x) => x.name === name);
    return s ? med(s.runs.map((r) => r.value)) : NaN; };
  const h1 = val(j, 'rtt: grpc health check sequential');
  const h50 = val(j, 'rtt: grpc health check x50 in flight');
  const ping = val(j, 'rtt: redis PING sequential');
  // A unary call one at a time waits for a round trip to the server and, inside it, one
  // from the server to Redis: neither can cost less than its bare form.
  const serial = 1 / (1 / h1 + 1 / ping);
  const f = (x) => Math.round(x).toLocaleString('en-US');
  const r = (x, y) => (x / y).toFixed(2) + 'x';
  const rows = [
    ['add() x50: bare health checks, 50 in flight (no Redis, no work)', h50,
      val(b, 'enqueue: add() x50 concurrent producers')],
    ['add() sequential: a bare health check + a bare PING, one after the other', serial,
      val(b, 'enqueue: add() sequential')],
    ['e2e concurrency 1: the same two bare round trips per job (no script; a stream message is lighter than a unary call)',
      serial, val(b, 'e2e: worker concurrency 1')],
  ];
  console.log('| floor | jobwire floor, calls/s | BullMQ, jobs/s | floor/BullMQ |');
  console.log('|---|---:|---:|---:|');
  for (const [name, x, y] of rows) console.log('| ' + name + ' | ' + f(x) + ' | ' + f(y) + ' | ' + r(x, y) + ' |');
  console.log('(bare round trips: health check one at a time ' + f(h1) + '/s, Redis PING one at a time ' + f(ping) + '/s)');
"
echo
echo "## Server RSS"
echo "$RSS_TABLE" | tail -n 1
echo
node --input-type=module -e "
  import { readFileSync } from 'node:fs';
  const load = (f) => JSON.parse(readFileSync(f, 'utf8'));
  const med = (xs) => { const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
  const us = (s, k) => med(s.runs.map((r) => (r[k] * 1e4) / r.value));
  const val = (s) => med(s.runs.map((r) => r.value));
  const figures = (doc) => {
    const bulk = doc.scenarios.find((s) => s.name.startsWith('enqueue: addBulk'));
    const e2e = doc.scenarios.filter((s) => s.name.startsWith('e2e:') && !s.name.includes('attempts'));
    const best = e2e.reduce((a, b) => (val(b) > val(a) ? b : a));
    return { best, bestRate: val(best), add: us(bulk, 'redisCpu'), fetch: us(best, 'redisCpu'),
      own: us(best, 'nodeCpu') + us(bulk, 'nodeCpu') };
  };
  const b = figures(load('$OUT/bullmq.json'));
  const j = figures(load('$OUT/jobwire.json'));
  const mem = { bullmq: ($m1 - $m0) / $FILL, jobwire: ($m3 - $m2) / $FILL };
  const f = (x) => x.toFixed(1);
  console.log('| figure | BullMQ | jobwire | jobwire/BullMQ |');
  console.log('|---|---:|---:|---:|');
  console.log('| best e2e configuration | ' + b.best.name + ' | ' + j.best.name + ' | |');
  console.log('| best e2e jobs/s | ' + Math.round(b.bestRate) + ' | ' + Math.round(j.bestRate) + ' | ' + (j.bestRate / b.bestRate).toFixed(2) + 'x |');
  const lc = (x) => x.add + x.fetch;
  console.log('| Redis CPU µs per lifecycle (batched add + lease + ack) | ' + f(lc(b)) + ' (' + f(b.add) + ' + ' + f(b.fetch) + ') | ' + f(lc(j)) + ' (' + f(j.add) + ' + ' + f(j.fetch) + ') | ' + (lc(j) / lc(b)).toFixed(2) + 'x |');
  console.log('| Node / jobwire server CPU µs per lifecycle | ' + f(b.own) + ' | ' + f(j.own) + ' | ' + (j.own / b.own).toFixed(2) + 'x |');
  console.log('| Redis bytes per waiting job (100-byte payload, $FILL jobs) | ' + Math.round(mem.bullmq) + ' | ' + Math.round(mem.jobwire) + ' | ' + (mem.jobwire / mem.bullmq).toFixed(2) + 'x |');
"

if [ "$EXTRA" = 1 ]; then
  JW_MEM_URL="${REDIS_URL:-redis://127.0.0.1:$PORT/1}"
  EXTRA_ARGS=(--rates "$RATES" --rate-secs "$RATE_SECS" --drain-jobs "$DRAIN_JOBS" --redis-url "$JW_MEM_URL")
  if [ -z "$MASTERS" ]; then
    echo "== extra: BullMQ fixed rate and drain" >&2
    each_redis flushall >/dev/null
    (cd "$B" && timeout "$STEP_TIMEOUT" node "$ROOT/scripts/bullmq-extra.mjs" --harness "$B" --port "$PORT" \
      --pidfile "$PIDFILE" --rates "$RATES" --secs "$RATE_SECS" --drain "$DRAIN_JOBS" --concurrency 100 \
      --json "$OUT/bullmq-extra.json" >&2)
  fi
  echo "== extra: jobwire fixed rate and drain" >&2
  each_redis flushall >/dev/null
  EXTRA_PLAIN=$(bench_jobwire --only rate,drain "${EXTRA_ARGS[@]}" --json "$OUT/jobwire-extra.json")
  echo "== extra: jobwire with $JW_GROUPS groups" >&2
  each_redis flushall >/dev/null
  EXTRA_GROUPS=$(bench_jobwire --only e2e,rate,drain --groups "$JW_GROUPS" -n "$N" --e2e 1x1,2x256 \
    "${EXTRA_ARGS[@]}" --label "groups" --json "$OUT/jobwire-groups.json")
  echo "== extra: jobwire with TLS and bearer tokens" >&2
  each_redis flushall >/dev/null
  TLS_DIR="$SCRATCH/tls"
  bash "$ROOT/scripts/dev-certs.sh" "$TLS_DIR" bench >/dev/null
  "$JOBWIRE" token new --id bench >"$TLS_DIR/bench.new"
  head -1 "$TLS_DIR/bench.new" >"$TLS_DIR/bench.token"
  SHA=$(sed -n 's/^ *sha256: "\([0-9a-f]*\)"$/\1/p' "$TLS_DIR/bench.new")
  cat >"$TLS_DIR/auth.yaml" <<AUTH
principals:
  - name: bench
    tokens: [{id: bench, sha256: "$SHA"}]
    grants:
      - {queues: ["*"], roles: [producer, worker, admin]}
AUTH
  TLS_GRPC=$((GRPC_PORT + 2)); TLS_HTTP=$((GRPC_PORT + 3))
  RUST_LOG=warn "$JOBWIRE" serve --redis-url "$JOBWIRE_URL" \
    --grpc-addr "127.0.0.1:$TLS_GRPC" --http-addr "127.0.0.1:$TLS_HTTP" \
    --tls-cert "$TLS_DIR/server.crt" --tls-key "$TLS_DIR/server.key" --auth-file "$TLS_DIR/auth.yaml" \
    >"$SCRATCH/jobwire-tls.log" 2>&1 &
  TLS_PID=$!
  wait_ready "$TLS_HTTP" "$SCRATCH/jobwire-tls.log"
  # Stop the plain server meanwhile: one jobwire process on the box at a time.
  kill -STOP "$SERVER_PID"
  EXTRA_TLS=$(JOBWIRE_TOKEN="$(cat "$TLS_DIR/bench.token")" timeout "$STEP_TIMEOUT" "$JOBWIRE" bench \
    --server "https://localhost:$TLS_GRPC" --tls-ca "$TLS_DIR/ca.crt" \
    --server-pid "$TLS_PID" $(printf -- '--redis-pid %s ' $REDIS_PIDS) --quiet-wait "$QUIET_WAIT" \
    --retries "$RETRIES" --only enqueue,e2e,latency,rate,drain -n "$N" --in-flight 50 --e2e 1x1,2x256 \
    "${EXTRA_ARGS[@]}" --label "tls" --json "$OUT/jobwire-tls.json")
  kill -CONT "$SERVER_PID"
  each_redis flushall >/dev/null

  echo
  echo "## Fixed rate and drain, jobwire (plain)"
  echo "$EXTRA_PLAIN"
  if [ -f "$OUT/bullmq-extra.json" ]; then
    echo
    echo "## Fixed rate and drain, jobwire / BullMQ (BullMQ: one Worker of concurrency 100)"
    node "$ROOT/scripts/extra-report.mjs" "$OUT/bullmq-extra.json" "$OUT/jobwire-extra.json"
  fi
  echo
  echo "## jobwire with $JW_GROUPS groups (job i in group g<i mod $JW_GROUPS>)"
  echo "$EXTRA_GROUPS"
  echo
  echo "## jobwire with TLS and bearer tokens (compare with the plain tables above)"
  echo "$EXTRA_TLS"
fi

echo
echo "(results kept in $OUT)"
