#!/usr/bin/env bash
# jobwire on a 1-master vs a 3-master Redis Cluster, same box, same load (not part of CI).
#
# Builds jobwire (release), starts two clusters of real redis-server processes on free
# loopback ports: (a) ONE master owning all 16384 slots, (b) THREE masters (no replicas),
# both with --save "" --appendonly no (the queue's own work, no fsync), and one
# `jobwire serve` (release) on each with --redis-url redis+cluster://... . Then, for
# $ROUNDS rounds, alternating (a) and (b) so both see the same box noise, runs
#   jobwire bench --only e2e --queues 6 --e2e $E2E -n $N --redis-url <the cluster>
# The bench names the 6 queues so that their hash slots ({queue}) put 2 on each of the
# 3 masters, reads every master's INFO cpu before and after each scenario, and prints
# Redis CPU µs per job lifecycle (enqueue + lease + ack) per master. At the end this
# script prints, per round and configuration: end-to-end jobs/s on 1 and on 3 masters,
# their ratio, Redis CPU µs per job per master, the spread (max/min master CPU), the
# jobwire server's own CPU µs per job, and the model
#     jobs/s ceiling = masters x (10^6 / Redis CPU µs per job lifecycle on the busiest master)
# (computed by the bench as jobs / CPU-seconds of the busiest master).
#
# Why a 1-master CLUSTER rather than a single Redis for (a): the server then runs the same
# cluster client, routing and sharded pub/sub in both cases, so the two differ only in the
# number of masters. (TOPOLOGIES="one three single" adds (c), a plain single redis-server,
# which shows the cost of the cluster client itself.)
#
# On a 2-core box the three masters, the jobwire server and the bench client share 2 cores:
# the jobs/s ratio there cannot show the scaling (the server and client are busy too); the
# per-master CPU figures and the model are what carry over to a box with a core per master.
#
# Knobs (environment): ROUNDS (2), N (60000), E2E (4x64,2x256), QUIET_WAIT (2 s before
# each measurement), TOPOLOGIES ("one three"), STEP_TIMEOUT (600 s per bench call). The scratch dir
# (logs, bench tables, JSON) is kept; the processes started here are stopped at exit.
# The defaults take about 2 minutes on a 2-core box after the release build (ROUNDS=3
# N=100000: about 4); figures and how to read them: docs/cluster.md, "How far it scales".
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS="${ROUNDS:-2}"
N="${N:-60000}"
E2E="${E2E:-4x64,2x256}"
QUIET_WAIT="${QUIET_WAIT:-2}"
read -r -a TOPOS <<<"${TOPOLOGIES:-one three}"
STEP_TIMEOUT="${STEP_TIMEOUT:-600}"

command -v redis-server >/dev/null || { echo "redis-server is missing (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
command -v redis-cli >/dev/null || { echo "redis-cli is missing (apt-get install -y redis-tools)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is missing (for the summary)" >&2; exit 1; }

SCRATCH="$(mktemp -d /tmp/jobwire-bench-cluster.XXXXXX)"
OUT="$SCRATCH/out"
mkdir -p "$OUT"
echo "scratch: $SCRATCH" >&2

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# A TCP port on 127.0.0.1 that nothing answers on, with port+10000 (the cluster bus) free too.
NEXT_PORT=$((20000 + RANDOM % 20000))
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # sets PORT (no subshell: NEXT_PORT must advance)
  while in_use "$NEXT_PORT" || in_use $((NEXT_PORT + 10000)); do NEXT_PORT=$((NEXT_PORT + 1)); done
  PORT=$NEXT_PORT
  NEXT_PORT=$((NEXT_PORT + 1))
}

(cd "$ROOT" && cargo build --release --locked --quiet --bin jobwire)
JOBWIRE="$ROOT/target/release/jobwire"

# start_redis NAME PORT [cluster]: one redis-server in the foreground of a background job.
start_redis() {
  local name=$1 port=$2 dir="$SCRATCH/$1-$2"
  mkdir -p "$dir"
  local extra=()
  [ "${3:-}" = cluster ] && extra=(--cluster-enabled yes --cluster-config-file "$dir/nodes.conf"
    --cluster-node-timeout 2000)
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    --maxmemory-policy noeviction --logfile "$dir/redis.log" "${extra[@]}" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server on $port did not start" >&2; cat "$dir/redis.log" >&2; exit 1
}

wait_cluster_ok() { # ports...
  local p
  for p in "$@"; do
    for _ in $(seq 200); do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
      sleep 0.05
    done
    redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || { echo "cluster on $p not ok" >&2; exit 1; }
  done
}

# start_cluster NAME MASTERS: sets CLUSTER_URL (redis+cluster://seeds).
start_cluster() {
  local name=$1 masters=$2 ports=()
  for _ in $(seq "$masters"); do
    free_port
    start_redis "$name" "$PORT" cluster
    ports+=("$PORT")
  done
  if [ "$masters" -eq 1 ]; then
    # redis-cli --cluster create wants 3 masters at least: give the one node every slot.
    redis-cli -p "${ports[0]}" cluster addslotsrange 0 16383 >/dev/null
  else
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-replicas 0 \
      --cluster-yes >"$SCRATCH/$name-create.log" 2>&1
  fi
  wait_cluster_ok "${ports[@]}"
  local seeds
  seeds=$(printf '127.0.0.1:%s,' "${ports[@]}")
  CLUSTER_URL="redis+cluster://${seeds%,}"
}

# start_server NAME URL: starts `jobwire serve` on free ports; sets SERVER_URL and SERVER_PID.
start_server() {
  local name=$1 url=$2 grpc http
  free_port
  grpc=$PORT
  free_port
  http=$PORT
  RUST_LOG=warn "$JOBWIRE" serve --redis-url "$url" --grpc-addr "127.0.0.1:$grpc" \
    --http-addr "127.0.0.1:$http" >"$SCRATCH/$name-jobwire.log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break
    sleep 0.05
  done
  curl -sf "http://127.0.0.1:$http/readyz" >/dev/null || {
    echo "jobwire ($name) did not become ready" >&2; cat "$SCRATCH/$name-jobwire.log" >&2; exit 1; }
  SERVER_URL="http://127.0.0.1:$grpc"
}

declare -A URL SRV SPID
for t in "${TOPOS[@]}"; do
  case $t in
    one) start_cluster one 1; URL[one]=$CLUSTER_URL ;;
    three) start_cluster three 3; URL[three]=$CLUSTER_URL ;;
    single) free_port; start_redis single "$PORT"; URL[single]="redis://127.0.0.1:$PORT" ;;
    *) echo "TOPOLOGIES: one, three, single (not $t)" >&2; exit 1 ;;
  esac
done
for t in "${TOPOS[@]}"; do
  start_server "$t" "${URL[$t]}"
  SRV[$t]=$SERVER_URL
  SPID[$t]=$SERVER_PID
  echo "$t: ${URL[$t]} <- jobwire ${SRV[$t]} (pid ${SPID[$t]})" >&2
done

for round in $(seq "$ROUNDS"); do
  for t in "${TOPOS[@]}"; do
    echo "== round $round/$ROUNDS: $t" >&2
    timeout "$STEP_TIMEOUT" "$JOBWIRE" bench --server "${SRV[$t]}" --server-pid "${SPID[$t]}" \
      --redis-url "${URL[$t]}" --only e2e --queues 6 --e2e "$E2E" -n "$N" --runs 1 \
      --quiet-wait "$QUIET_WAIT" --label "$t-r$round" --json "$OUT/$t-r$round.json" \
      >"$OUT/$t-r$round.txt"
    sed -n '/^Redis CPU per master/,$p' "$OUT/$t-r$round.txt" | grep '^| e2e' >&2 || true
  done
done

echo
echo "## jobwire on a 1-master vs a 3-master Redis Cluster ($(nproc) cores, N=$N, 6 queues, $ROUNDS round(s))"
echo
python3 - "$OUT" "$ROUNDS" "${TOPOS[@]}" <<'EOF'
import json, sys
out, rounds, topos = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = {"one": "1 master", "three": "3 masters", "single": "single Redis"}

def figures(run):
    nodes = run["redisNodes"]
    jobs = sum(n["jobs"] for n in nodes)
    cpu = [n["cpuSec"] for n in nodes]
    per = [c * 1e6 / n["jobs"] if n["jobs"] else float("nan") for c, n in zip(cpu, nodes)]
    return {
        "rate": run["value"],
        "total": sum(cpu) * 1e6 / jobs,
        "per": per,
        "jobs": [n["jobs"] for n in nodes],
        "spread": max(cpu) / min(cpu) if min(cpu) > 0 else float("inf"),
        "ceiling": jobs / max(cpu),
        "server": run["nodeCpu"] * 1e4 / run["value"] if run.get("nodeCpu") is not None else float("nan"),
    }

rows = {}
for r in range(1, rounds + 1):
    for t in topos:
        doc = json.load(open(f"{out}/{t}-r{r}.json"))
        for s in doc["scenarios"]:
            for run in s["runs"]:
                rows[(r, s["name"], t)] = figures(run)

print("| round | e2e config | topology | jobs/s | Redis CPU µs/job, all masters | µs/job served, per master | jobs per master | master CPU max/min | jobwire server CPU µs/job | model ceiling jobs/s |")
print("|---|---|---|---:|---:|---|---|---:|---:|---:|")
for (r, name, t), f in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], topos.index(kv[0][2]))):
    print(f"| {r} | {name.removeprefix('e2e: ')} | {names[t]} | {f['rate']:,.0f} | {f['total']:.1f} | "
          + " / ".join(f"{x:.1f}" for x in f["per"]) + " | "
          + " / ".join(str(j) for j in f["jobs"]) + f" | {f['spread']:.2f} | {f['server']:.1f} | {f['ceiling']:,.0f} |")
print()
print("Ratios 3 masters / 1 master, within each round (same box, same minute):")
print()
print("| round | e2e config | jobs/s ratio | Redis CPU µs/job (all masters) ratio | model ceiling ratio |")
print("|---|---|---:|---:|---:|")
for (r, name, t), f in sorted(rows.items()):
    if t != "three" or (r, name, "one") not in rows:
        continue
    o = rows[(r, name, "one")]
    print(f"| {r} | {name.removeprefix('e2e: ')} | {f['rate'] / o['rate']:.2f} | {f['total'] / o['total']:.2f} | {f['ceiling'] / o['ceiling']:.2f} |")
EOF
echo
echo "Model: jobs/s ceiling = masters x (10^6 / Redis CPU µs per job lifecycle on the busiest master),"
echo "one core per master; the jobwire servers and workers are assumed not to be the limit."
echo "(bench output and JSON kept in $OUT)"
