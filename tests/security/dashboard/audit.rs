//! The real binary (JSON logs): a replay through the dashboard writes the audit line of a
//! ReplayDeadLetters RPC, and the result page shows that line's principal, credential,
//! action, queue, count and outcome; no log line carries the session's token or a payload.
//! A viewer's refused actions are refused by the RPC, which writes its `denied` line.

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

/// The real binary serving `--ui` with `who` in its auth file (JSON logs at debug), its log
/// lines (raw and parsed), the lines seen until it served, and its gRPC and HTTP addresses.
struct Binary {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<(String, Value)>,
    seen: Vec<String>,
    grpc: std::net::SocketAddr,
    http: std::net::SocketAddr,
    _dir: tempfile::TempDir,
    _redis: TestRedis,
}

impl Binary {
    async fn start(who: &[&Who]) -> Binary {
        let dir = tempfile::tempdir().expect("tempdir");
        let auth_file = dir.path().join("auth.yaml");
        std::fs::write(&auth_file, auth_yaml(who)).expect("write");
        let redis = TestRedis::start().await;
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
            .args(["serve", "--log-format", "json", "--ui"])
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(["--redis-url", &redis.url, "--shutdown-grace", "1s"])
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
        Binary {
            grpc: addr("grpc"),
            http: addr("http"),
            child,
            lines,
            seen,
            _dir: dir,
            _redis: redis,
        }
    }

    /// The next `jobwire::audit` line (within 10 s).
    async fn next_audit(&mut self) -> Value {
        loop {
            let (raw, v) = tokio::time::timeout(Duration::from_secs(10), self.lines.recv())
                .await
                .expect("an audit line within 10 s")
                .expect("jobwire is running");
            self.seen.push(raw);
            if v["target"] == "jobwire::audit" {
                return v;
            }
        }
    }
}

#[tokio::test]
async fn a_dashboard_replay_is_audited_like_the_rpc_and_logs_no_secret() {
    let ops = ops();
    let mut bin = Binary::start(&[&ops]).await;
    let channel = plain_channel(bin.grpc).await;
    let mut c = Clients::new(&channel, ops.bearer());
    let payload = b"{\"card\":\"4111-secret-payload\"}";
    kill(&mut c, "aud", "p1", "charge", "timeout", payload).await;
    kill(&mut c, "aud", "p2", "charge", "timeout", payload).await;

    let mut b = Browser::new(bin.http);
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

    let logged = bin.next_audit().await;
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
    // Every line the server writes: stop it (SIGTERM: a graceful shutdown, its log flushed)
    // and read its stderr to the end.
    b.get("/ui/").await;
    let pid = bin.child.id().expect("jobwire is running");
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill -TERM");
    assert!(term.success(), "kill -TERM {pid}");
    while let Some((raw, _)) = tokio::time::timeout(Duration::from_secs(20), bin.lines.recv())
        .await
        .expect("jobwire exits within 20 s of SIGTERM")
    {
        bin.seen.push(raw);
    }
    let secret = ops.token.reveal();
    let secret = secret.rsplit('_').next().expect("secret");
    for line in &bin.seen {
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
        bin.seen.iter().any(|l| l.contains("dashboard login")),
        "the login is logged (without the token)"
    );
    let _ = bin.child.kill().await;
}

#[tokio::test]
async fn a_viewers_refused_actions_are_refused_and_audited_by_the_rpc() {
    let (ops, watcher) = (ops(), watcher());
    let mut bin = Binary::start(&[&ops, &watcher]).await;
    let channel = plain_channel(bin.grpc).await;
    let mut c = Clients::new(&channel, ops.bearer());
    kill(&mut c, "den", "j1", "send", "timeout", b"{}").await;

    let mut b = Browser::new(bin.http);
    b.login(&watcher.token.reveal()).await;
    let csrf = b.get("/ui/queues/den/dead").await.csrf();
    let csrf = csrf.as_str();
    for (path, fields, action) in [
        ("/ui/queues/den/pause", vec![], "pause_queue"),
        (
            "/ui/queues/den/purge",
            vec![("confirm", "den"), ("include_dead", "1")],
            "purge_queue",
        ),
        (
            "/ui/queues/den/jobs/j1/replay",
            vec![],
            "replay_dead_letters",
        ),
        (
            "/ui/queues/den/jobs/j1/delete",
            vec![("confirmed", "1")],
            "delete_dead_letters",
        ),
        (
            "/ui/queues/den/dead",
            vec![("op", "replay-filter")],
            "replay_dead_letters",
        ),
        (
            "/ui/queues/den/dead",
            vec![("op", "delete-filter"), ("confirmed", "1")],
            "delete_dead_letters",
        ),
        (
            "/ui/queues/den/dead",
            vec![("op", "delete-selected"), ("job_id", "j1")],
            "delete_dead_letters",
        ),
    ] {
        let mut f = fields.clone();
        f.push(("csrf", csrf));
        let p = b.post(path, &f).await;
        assert_eq!(p.status, StatusCode::FORBIDDEN, "{path} {f:?}: {}", p.body);
        assert!(
            p.body.contains("PERMISSION_DENIED") || p.body.contains("watcher"),
            "{}",
            p.body
        );
        let line = bin.next_audit().await;
        assert_eq!(line["outcome"], "denied", "{path} {f:?}: {line}");
        assert_eq!(line["action"], action, "{path} {f:?}: {line}");
        assert_eq!(line["principal"], "watcher", "{line}");
        assert_eq!(line["queue"], "den", "{line}");
    }
    assert!(!paused(&mut c, "den").await);
    assert_eq!(state(&mut c, "den", "j1").await, pb::JobState::Dead);
    let _ = bin.child.kill().await;
}
