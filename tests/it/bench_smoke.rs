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
