//! Start-up of the real binary: a bad auth file refuses the start with a message naming the
//! file and the line; without an auth file a non-loopback --grpc-addr is refused (exit 64,
//! the flag named) unless --insecure, which starts with a loud warning.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::harness::TestRedis;

async fn jobwire(args: &[&str]) -> (Option<i32>, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("jobwire exits within 30 s")
    .expect("run jobwire");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_bad_auth_file_refuses_the_start_naming_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = dir.path().join("auth.yaml");
    std::fs::write(
        &yaml,
        "principals:\n  - name: ci\n    certs: [ci.example]\n    grants:\n      - queues: [emails]\n        roles: [producer, superuser]\n",
    )
    .expect("write");
    let toml = dir.path().join("auth.toml");
    std::fs::write(&toml, "[[principals]]\nname = \"ci\"\ncerts = [\"x\"]\ngrants = [{ queues = [\"a*b\"], roles = [\"viewer\"] }]\n")
        .expect("write");
    let redis = TestRedis::start().await;
    for (file, line, says) in [(&yaml, "line 6", "superuser"), (&toml, "line 4", "a*b")] {
        let (code, stderr) = jobwire(&[
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--redis-url",
            &redis.url,
            "--auth-file",
            file.to_str().expect("path"),
        ])
        .await;
        assert_ne!(code, Some(0), "{stderr}");
        assert!(
            stderr.contains(&file.display().to_string())
                && stderr.contains(line)
                && stderr.contains(says),
            "names the file, {line} and {says}: {stderr}"
        );
    }
    let (code, stderr) = jobwire(&["serve", "--auth-file", "/nonexistent/auth.json"]).await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("--auth-file"), "{stderr}");
}

#[tokio::test]
async fn a_non_loopback_address_needs_an_auth_file_or_insecure() {
    let (code, stderr) = jobwire(&["serve", "--grpc-addr", "0.0.0.0:0"]).await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("--grpc-addr 0.0.0.0:0")
            && stderr.contains("--auth-file")
            && stderr.contains("--insecure"),
        "{stderr}"
    );

    let redis = TestRedis::start().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args([
            "serve",
            "--grpc-addr",
            "0.0.0.0:0",
            "--http-addr",
            "127.0.0.1:0",
            "--insecure",
            "--log-format",
            "json",
            "--redis-url",
            &redis.url,
        ])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let (mut warned, mut serving) = (false, false);
    while !(warned && serving) {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a log line within 20 s")
            .expect("read")
            .expect("jobwire exited");
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        if v["level"] == "WARN"
            && v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("INSECURE"))
        {
            warned = true;
        }
        serving |= v["message"] == "jobwire serving";
    }
    let _ = child.start_kill();
}
