//! `jobwire bench` runs every scenario end to end against a real server (tiny sizes: this
//! checks that the command works and writes the harness's JSON shape, not how fast anything is).

use std::process::Command;

use crate::harness::*;
use crate::topology::TestCluster;

/// Runs `jobwire bench <args>` (the real binary) off the async runtime; its output.
async fn run_bench(args: &[&str]) -> std::process::Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .arg("bench")
            .args(&args)
            .output()
            .expect("run jobwire bench")
    })
    .await
    .expect("join")
}

/// The stdout of a bench run that must have succeeded (else fails with stdout and stderr).
fn succeeded(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test]
async fn the_bench_command_runs_every_scenario_and_writes_json() {
    let (_redis, app) = TestApp::with_redis().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("bench.json");
    let server = format!("http://{}", app.grpc);
    let out = run_bench(&[
        "--server",
        &server,
        "-n",
        "300",
        "--e2e",
        "1x1,2x8",
        "--batch",
        "100",
        "--in-flight",
        "8",
        "--latency-jobs",
        "20",
        "--failure-jobs",
        "30",
        "--rss-streams",
        "10",
        "--rss-credits",
        "2",
        "--with-retry-policy",
        // The server runs inside this test process: its pid is ours.
        "--server-pid",
        &std::process::id().to_string(),
        "--json",
        &json.to_string_lossy(),
    ])
    .await;
    let stdout = succeeded(&out);
    for scenario in [
        "enqueue: addBulk",
        "e2e: worker concurrency 1",
        "latency",
        "failure",
    ] {
        assert!(
            stdout.contains(scenario),
            "{scenario} missing from:\n{stdout}"
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid JSON");
    assert!(v.to_string().contains("addBulk"), "{v}");
}

/// The fixed-rate and drain scenarios (not run by default) report their latency
/// percentiles, and the drain reads Redis's memory before the fill, full and after.
#[tokio::test]
async fn the_fixed_rate_and_drain_scenarios_report_latencies_and_redis_memory() {
    let (redis, app) = TestApp::with_redis().await;
    let server = format!("http://{}", app.grpc);
    let out = run_bench(&[
        "--server",
        &server,
        "--only",
        "rate,drain",
        "--rates",
        "40,80",
        "--rate-secs",
        "1",
        "--drain-jobs",
        "300",
        "--drain-workers",
        "1x8",
        "--redis-url",
        &redis.url,
        "--server-pid",
        &std::process::id().to_string(),
    ])
    .await;
    let stdout = succeeded(&out);
    for row in [
        "fixed rate: 40 jobs/s for 1 s",
        "fixed rate: 80 jobs/s for 1 s",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {row} |")))
            .unwrap_or_else(|| panic!("{row} missing from:\n{stdout}"));
        assert!(
            line.contains("enqueue->lease p50") && line.contains("enqueue->ack p50"),
            "{line}"
        );
        assert!(line.contains("Enqueue errors 0.00"), "{line}");
    }
    let drain = stdout
        .lines()
        .find(|l| l.starts_with("| drain: 300 pre-filled jobs |"))
        .unwrap_or_else(|| panic!("drain missing from:\n{stdout}"));
    assert!(drain.contains("used_memory before the fill"), "{drain}");
    // Memory figures were read (a dash stands for one that was not).
    let memory = drain.split("used_memory").nth(1).expect("memory notes");
    assert!(!memory.contains('–'), "{drain}");
}

/// Without `--server-pid` the RSS scenario cannot be measured: it is skipped with a note,
/// and the table of what was measured is still printed (and the command succeeds).
#[tokio::test]
async fn the_bench_without_a_server_pid_skips_rss_and_still_prints_the_table() {
    let (_redis, app) = TestApp::with_redis().await;
    let server = format!("http://{}", app.grpc);
    let out = run_bench(&[
        "--server",
        &server,
        "-n",
        "50",
        "--batch",
        "10",
        "--only",
        "enqueue,rss",
        "--in-flight",
        "4",
        "--rss-streams",
        "2",
        "--rss-credits",
        "2",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("enqueue: addBulk"),
        "table missing:\n{stdout}"
    );
    assert!(
        stdout.contains("RSS") && stdout.contains("--server-pid"),
        "a note says RSS was skipped and why:\n{stdout}"
    );
}

/// Runs `jobwire bench --only e2e --e2e 2x8 -n N --queues Q --redis-url URL --json` against
/// `server`; returns stdout and the JSON document.
async fn bench_e2e(
    server: String,
    url: String,
    n: usize,
    queues: usize,
) -> (String, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("bench.json");
    let (n, queues) = (n.to_string(), queues.to_string());
    let out = run_bench(&[
        "--server",
        &server,
        "--redis-url",
        &url,
        "--only",
        "e2e",
        "--e2e",
        "2x8",
        "-n",
        &n,
        "--queues",
        &queues,
        "--json",
        &json.to_string_lossy(),
    ])
    .await;
    let stdout = succeeded(&out);
    let v =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid JSON");
    (stdout, v)
}

/// The e2e row of the per-master table, split into its cells:
/// `| scenario | jobs | masters | total µs/job | µs/job per master | jobs per master | max/min | ceiling |`.
fn per_master_row(stdout: &str) -> Vec<String> {
    let table = stdout
        .split_once("Redis CPU per master")
        .unwrap_or_else(|| panic!("no per-master table in:\n{stdout}"))
        .1;
    let row = table
        .lines()
        .find(|l| l.starts_with("| e2e: 2 workers x 8 credits"))
        .unwrap_or_else(|| panic!("no e2e row in:\n{table}"));
    row.split('|').map(|c| c.trim().to_owned()).collect()
}

/// A figure of the table (thousands separators removed).
fn num(cell: &str) -> f64 {
    cell.replace(',', "").parse().unwrap_or(f64::NAN)
}

/// With `--redis-url` the bench reads every master's CPU from `INFO cpu` before and after
/// each scenario and prints a per-master table: Redis CPU µs per job for each master, the
/// total, how evenly it spread (max/min) and the model ceiling. One real Redis: one master.
#[tokio::test]
async fn the_bench_reads_redis_cpu_per_master_from_info() {
    let (redis, app) = TestApp::with_redis().await;
    let (stdout, v) = bench_e2e(format!("http://{}", app.grpc), redis.url.clone(), 400, 3).await;
    let cells = per_master_row(&stdout);
    let run = &v["scenarios"][0]["runs"][0];
    let nodes = run["redisNodes"].as_array().expect("redisNodes in the run");
    if !redis.url.contains("+cluster://") {
        assert_eq!(nodes.len(), 1, "a single Redis is one master: {run}");
    }
    assert_eq!(cells[2], "400", "jobs of the scenario: {cells:?}");
    assert_eq!(cells[3], nodes.len().to_string(), "masters: {cells:?}");
    // Enqueue + lease + ack of a 16-byte job costs Redis some µs; generous bounds, only
    // to show the figure is read and scaled (not 0, not seconds).
    let total = num(&cells[4]);
    assert!(
        total > 1.0 && total < 100_000.0,
        "total µs/job {total}: {cells:?}"
    );
    assert!(nodes[0]["cpuSec"].as_f64().unwrap_or(0.0) > 0.0, "{run}");
    let jobs: u64 = nodes.iter().map(|n| n["jobs"].as_u64().unwrap_or(0)).sum();
    assert_eq!(jobs, 400, "{run}");
    // As the BullMQ harness reports after a drain: jobs left (read from the server) and
    // Redis's used_memory (read from INFO), in the JSON and in the table's notes.
    assert_eq!(run["leftInQueue"].as_u64(), Some(0), "{run}");
    let mb = run["usedMemoryMB"]
        .as_f64()
        .expect("usedMemoryMB in the run");
    assert!(mb > 0.1 && mb < 100_000.0, "used_memory {mb} MB: {run}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| e2e: 2 workers x 8 credits"))
        .unwrap_or_else(|| panic!("no e2e row in:\n{stdout}"));
    assert!(row.contains("left in queue 0;"), "{row}");
    assert!(row.contains("Redis used_memory"), "{row}");
}

/// `FCALL` + `EVALSHA` + `EVAL` calls a node has served so far (`INFO commandstats`).
async fn script_calls(c: &TestCluster, port: u16) -> u64 {
    let mut conn = c.conn(port).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// On a real 3-master cluster (`redis+cluster://` seeds) the bench finds the three masters
/// with CLUSTER NODES, puts 2 of its 6 queues on each (so 600 jobs split 200 / 200 / 200),
/// and prints a CPU figure for every master; each master's script-call count went up, so
/// the split is real, not only what the bench believes.
#[tokio::test]
async fn the_bench_spreads_queues_over_cluster_masters_and_reads_each_ones_cpu() {
    let cluster = TestCluster::start(3, 0).await;
    let app = TestApp::spawn(test_config(&cluster.url)).await;
    let masters = cluster.masters().await;
    let mut before = Vec::new();
    for &m in &masters {
        before.push(script_calls(&cluster, m).await);
    }
    let (stdout, v) = bench_e2e(format!("http://{}", app.grpc), cluster.url.clone(), 600, 6).await;
    let cells = per_master_row(&stdout);
    assert_eq!(cells[3], "3", "three masters: {cells:?}");
    assert_eq!(cells[6], "200 / 200 / 200", "jobs per master: {cells:?}");
    let per: Vec<f64> = cells[5].split(" / ").map(num).collect();
    assert_eq!(per.len(), 3, "{cells:?}");
    assert!(
        per.iter().all(|x| *x > 0.0 && *x < 100_000.0),
        "µs/job per master: {cells:?}"
    );
    assert!(num(&cells[7]) >= 1.0, "max/min: {cells:?}");
    assert!(num(&cells[8]) > 0.0, "ceiling: {cells:?}");
    let run = &v["scenarios"][0]["runs"][0];
    assert_eq!(run["redisNodes"].as_array().map(Vec::len), Some(3), "{run}");
    for (i, &m) in masters.iter().enumerate() {
        let after = script_calls(&cluster, m).await;
        assert!(
            after > before[i],
            "master {m} ran no script during the bench: {stdout}"
        );
    }
}

/// The rtt group measures the floors under unary Enqueue: a bare health check one at a time
/// and `--in-flight` at a time, and with `--redis-url` a bare Redis PING one at a time; each
/// row reports a rate, and without `--redis-url` the PING row is left out with a note.
#[tokio::test]
async fn the_rtt_group_reports_the_grpc_and_redis_round_trip_floors() {
    let (redis, app) = TestApp::with_redis().await;
    let server = format!("http://{}", app.grpc);
    let rate_of = |stdout: &str, row: &str| -> f64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {row} |")))
            .unwrap_or_else(|| panic!("{row} missing from:\n{stdout}"));
        line.split('|')
            .nth(2)
            .expect("median column")
            .trim()
            .replace(',', "")
            .parse()
            .unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    let args = [
        "--server",
        &server,
        "--only",
        "rtt",
        "-n",
        "200",
        "--in-flight",
        "8",
    ];
    let out = run_bench(&[&args[..], &["--redis-url", &redis.url]].concat()).await;
    let stdout = succeeded(&out);
    for row in [
        "rtt: grpc health check sequential",
        "rtt: grpc health check x8 in flight",
        "rtt: redis PING sequential",
    ] {
        assert!(rate_of(&stdout, row) > 0.0, "{row}: {stdout}");
    }

    let out = run_bench(&args).await;
    let stdout = succeeded(&out);
    assert!(rate_of(&stdout, "rtt: grpc health check x8 in flight") > 0.0);
    assert!(!stdout.contains("| rtt: redis PING"), "{stdout}");
    assert!(
        stdout.contains("rtt: the Redis round trip needs --redis-url"),
        "{stdout}"
    );
}
