//! `jobwire bench` runs every scenario end to end against a real server (tiny sizes: this
//! checks that the command works and writes the harness's JSON shape, not how fast anything is).

use std::process::Command;

use crate::harness::*;

#[tokio::test]
async fn the_bench_command_runs_every_scenario_and_writes_json() {
    let (_redis, app) = TestApp::with_redis().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("bench.json");
    let out = tokio::task::spawn_blocking({
        let server = format!("http://{}", app.grpc);
        let json = json.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_jobwire"))
                .args([
                    "bench", "--server", &server, "-n", "300", "--e2e", "1x1,2x8", "--batch", "100",
                ])
                .args([
                    "--in-flight",
                    "8",
                    "--latency-jobs",
                    "20",
                    "--failure-jobs",
                    "30",
                ])
                .args([
                    "--rss-streams",
                    "10",
                    "--rss-credits",
                    "2",
                    "--with-retry-policy",
                ])
                // The server runs inside this test process: its pid is ours.
                .args(["--server-pid", &std::process::id().to_string()])
                .arg("--json")
                .arg(&json)
                .output()
                .expect("run jobwire bench")
        }
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
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

/// Without `--server-pid` the RSS scenario cannot be measured: it is skipped with a note,
/// and the table of what was measured is still printed (and the command succeeds).
#[tokio::test]
async fn the_bench_without_a_server_pid_skips_rss_and_still_prints_the_table() {
    let (_redis, app) = TestApp::with_redis().await;
    let out = tokio::task::spawn_blocking({
        let server = format!("http://{}", app.grpc);
        move || {
            Command::new(env!("CARGO_BIN_EXE_jobwire"))
                .args(["bench", "--server", &server, "-n", "50", "--batch", "10"])
                .args(["--only", "enqueue,rss", "--in-flight", "4"])
                .args(["--rss-streams", "2", "--rss-credits", "2"])
                .output()
                .expect("run jobwire bench")
        }
    })
    .await
    .expect("join");
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

/// With `--redis-url` the bench reads every master's CPU from `INFO cpu` before and after
/// each scenario and prints a per-master table: Redis CPU µs per job for each master, the
/// total, how evenly it spread (max/min) and the model ceiling. One real Redis: one master.
#[tokio::test]
async fn the_bench_reads_redis_cpu_per_master_from_info() {
    let (redis, app) = TestApp::with_redis().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("bench.json");
    let out = tokio::task::spawn_blocking({
        let server = format!("http://{}", app.grpc);
        let url = redis.url.clone();
        let json = json.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_jobwire"))
                .args(["bench", "--server", &server, "--redis-url", &url])
                .args([
                    "--only", "e2e", "--e2e", "2x8", "-n", "400", "--queues", "3",
                ])
                .arg("--json")
                .arg(&json)
                .output()
                .expect("run jobwire bench")
        }
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = stdout
        .split_once("Redis CPU per master")
        .unwrap_or_else(|| panic!("no per-master table in:\n{stdout}"))
        .1;
    let row = table
        .lines()
        .find(|l| l.starts_with("| e2e: 2 workers x 8 credits"))
        .unwrap_or_else(|| panic!("no e2e row in:\n{table}"));
    // | scenario | jobs | masters | total µs/job | master µs/job ... | max/min | ceiling |
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[2], "400", "jobs of the scenario: {row}");
    assert_eq!(cells[3], "1", "one master: {row}");
    let total: f64 = cells[4].replace(',', "").parse().expect("total µs/job");
    // Enqueue + lease + ack of a 16-byte job costs Redis some µs; generous bounds, only
    // to show the figure is read and scaled (not 0, not seconds).
    assert!(
        total > 1.0 && total < 100_000.0,
        "total µs/job {total}: {row}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid JSON");
    let run = &v["scenarios"][0]["runs"][0];
    let nodes = run["redisNodes"].as_array().expect("redisNodes in the run");
    assert_eq!(nodes.len(), 1, "{run}");
    assert!(nodes[0]["cpuSec"].as_f64().unwrap_or(0.0) > 0.0, "{run}");
    assert_eq!(nodes[0]["jobs"], 400, "{run}");
}
