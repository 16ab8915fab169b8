//! The real binary (JSON logs): a replay through the dashboard writes the audit line of a
//! ReplayDeadLetters RPC, and the result page shows that line's principal, credential,
//! action, queue, count and outcome; no log line carries the session's token or a payload.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::*;
use crate::harness::{plain_channel, TestRedis};

/// `key=value` of the page's audit line (values have no spaces, but the filter's).
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let at = line
        .find(&format!(" {key}="))
        .map(|i| i + 1)
        .or_else(|| line.starts_with(&format!("{key}=")).then_some(0))
        .unwrap_or_else(|| panic!("no {key} in {line}"));
    let rest = &line[at + key.len() + 1..];
    rest.split(' ').next().unwrap_or("")
}

#[tokio::test]
async fn a_dashboard_replay_is_audited_like_the_rpc_and_logs_no_secret() {
    let ops = ops();
    let dir = tempfile::tempdir().expect("tempdir");
    let auth_file = dir.path().join("auth.yaml");
    std::fs::write(&auth_file, auth_yaml(&[&ops])).expect("write");
    let redis = TestRedis::start().await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args(["serve", "--log-format", "json", "--ui"])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--redis-url", &redis.url])
        .arg("--auth-file")
        .arg(&auth_file)
        .env("RUST_LOG", "debug")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jobwire");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let (tx, mut lines) = mpsc::unbounded_channel::<(String, Value)>();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send((line, v));
            }
        }
    });
    let mut seen = Vec::new();
    let serving = loop {
        let (raw, v) = tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .expect("started within 20 s")
            .expect("jobwire exited");
        seen.push(raw);
        if v["message"] == "jobwire serving" {
            break v;
        }
    };
    let addr = |k: &str| -> std::net::SocketAddr {
        serving[k].as_str().expect("address").parse().expect("addr")
    };
    let channel = plain_channel(addr("grpc")).await;
    let mut c = Clients::new(&channel, ops.bearer());
    let payload = b"{\"card\":\"4111-secret-payload\"}";
    kill(&mut c, "aud", "p1", "charge", "timeout", payload).await;
    kill(&mut c, "aud", "p2", "charge", "timeout", payload).await;

    let mut b = Browser::new(addr("http"));
    b.login(&ops.token.reveal()).await;
    let csrf = b.get("/ui/queues/aud/dead").await.csrf();
    b.get("/ui/queues/aud/jobs/p1").await;
    let fields = [
        ("csrf", csrf.as_str()),
        ("op", "replay-filter"),
        ("error_type", "timeout"),
        ("confirmed", "1"),
    ];
    let done = b.post("/ui/queues/aud/dead", &fields).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("Replayed 2 jobs"), "{}", done.body);
    let start = done
        .body
        .find("principal=")
        .expect("an audit line on the page");
    let shown = &done.body[start..];
    let shown = &shown[..shown.find('<').expect("end of the line")];

    let logged = loop {
        let (raw, v) = tokio::time::timeout(Duration::from_secs(10), lines.recv())
            .await
            .expect("an audit line within 10 s")
            .expect("jobwire is running");
        seen.push(raw);
        if v["target"] == "jobwire::audit" {
            break v;
        }
    };
    assert_eq!(logged["action"], "replay_dead_letters");
    for key in ["principal", "via", "action", "queue", "outcome"] {
        assert_eq!(
            logged[key].as_str().expect("a string field"),
            field(shown, key),
            "{key}: logged {logged}, shown {shown}"
        );
    }
    assert_eq!(logged["count"].to_string(), field(shown, "count"));
    assert_eq!(logged["principal"], "ops-oncall");
    assert_eq!(logged["count"], 2);
    assert_eq!(state(&mut c, "aud", "p1").await, pb::JobState::Waiting);

    // Nothing logged so far carries the token's secret or the payload.
    b.get("/ui/").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok((raw, _)) = lines.try_recv() {
        seen.push(raw);
    }
    let secret = ops.token.reveal();
    let secret = secret.rsplit('_').next().expect("secret");
    for line in &seen {
        assert!(
            !line.contains(secret),
            "the token's secret in the log: {line}"
        );
        assert!(
            !line.contains("4111-secret-payload"),
            "a payload in the log: {line}"
        );
    }
    assert!(
        seen.iter().any(|l| l.contains("dashboard login")),
        "the login is logged (without the token)"
    );
    let _ = child.kill().await;
}
