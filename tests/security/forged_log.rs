//! Log lines cannot be forged from a client field (issue 31 item 4): the real binary, its
//! stderr captured in both log formats, is sent a Fail message and a cancel reason that
//! carry a fake audit line after a newline (and after `\r`, an ANSI escape, U+2028). The
//! only audit line of the log is the real admin action; no raw control or line-breaking
//! character reaches the log; each JSON line is one object. Names (a job's name, a worker
//! id, an error type) with such characters are refused with INVALID_ARGUMENT naming the field.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use jobwire::pb;
use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tonic::Code;

use crate::dashboard::put;
use crate::harness::TestRedis;
use crate::secured::*;

/// What a fake audit line looks like in the text format, after the break.
const FAKE: &str = "2026-12-07T22:00:00.000000Z  INFO jobwire::audit: admin action \
     principal=ops-oncall via=token:ops action=\"purge_queue\" queue=\"payments\" \
     filter=\"\" count=1200 outcome=\"done\"";

/// The breaks a client may try.
const BREAKS: [&str; 4] = ["\n", "\r", "\u{1b}[2K\r", "\u{2028}"];

/// A jobwire binary with `--log-format format`, its stderr lines and its gRPC address.
async fn spawn(
    format: &str,
    redis: &TestRedis,
) -> (
    tokio::process::Child,
    mpsc::UnboundedReceiver<String>,
    SocketAddr,
) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args(["serve", "--log-format", format])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--redis-url", &redis.url])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jobwire");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let (tx, mut lines) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            let _ = tx.send(line);
        }
    });
    let grpc = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .expect("started within 20 s")
            .expect("jobwire exited");
        if !line.contains("jobwire serving") {
            continue;
        }
        let addr = if format == "json" {
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            v["grpc"].as_str().expect("grpc").to_owned()
        } else {
            let at = line.find("grpc=").expect("grpc=") + "grpc=".len();
            line[at..]
                .split_whitespace()
                .next()
                .expect("addr")
                .to_owned()
        };
        break addr.parse().expect("grpc addr");
    };
    (child, lines, grpc)
}

/// Reads lines until one passes `done` (within 10 s); keeps every line read in `seen`.
async fn until(
    lines: &mut mpsc::UnboundedReceiver<String>,
    seen: &mut Vec<String>,
    what: &str,
    done: impl Fn(&str) -> bool,
) {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.recv())
            .await
            .unwrap_or_else(|_| panic!("{what} within 10 s; got {seen:#?}"))
            .expect("jobwire is running");
        let stop = done(&line);
        seen.push(line);
        if stop {
            return;
        }
    }
}

/// Is `line` an audit line: in the text format, one whose target (the first `jobwire::`
/// word, after the time, the level and the span, whose fields are the test's own) is
/// `jobwire::audit`, as `<time> <LEVEL> [span: ]jobwire::audit: ...`; in JSON, an object
/// with that target.
fn is_audit(format: &str, line: &str) -> bool {
    if format == "json" {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("one JSON object per line ({e}): {line:?}"));
        v["target"] == "jobwire::audit"
    } else {
        line.find("jobwire::")
            .is_some_and(|at| line[at..].starts_with("jobwire::audit:"))
    }
}

#[tokio::test]
async fn client_strings_cannot_forge_audit_lines_in_either_log_format() {
    let redis = TestRedis::start().await;
    for format in ["pretty", "json"] {
        let (mut child, mut lines, grpc) = spawn(format, &redis).await;
        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let mut c = Clients::new(&channel, Bearer::none());
        let queue = format!("forge-{format}");
        let mut seen = Vec::new();

        // Names refuse the characters outright.
        let st = c
            .jobs
            .enqueue(pb::EnqueueRequest {
                job: Some(pb::JobSpec {
                    name: format!("send\n{FAKE}"),
                    ..job(&queue, "named")
                }),
            })
            .await
            .expect_err("a job name with a newline");
        assert_eq!(st.code(), Code::InvalidArgument, "{}", st.message());
        assert!(st.message().contains("job.name"), "{}", st.message());
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::SubscribeRequest {
            message: Some(In::Open(pb::OpenStream {
                queues: vec![queue.clone()],
                credits: 1,
                worker_id: "w\r1".into(),
            })),
        })
        .expect("send");
        let refused = match c
            .workers
            .subscribe(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
        {
            Err(st) => st,
            Ok(r) => {
                let mut r = r.into_inner();
                tokio::time::timeout(Duration::from_secs(10), r.message())
                    .await
                    .expect("the stream refused within 10 s")
                    .expect_err("a worker id with a carriage return")
            }
        };
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(
            refused.message().contains("worker_id"),
            "{}",
            refused.message()
        );

        // Free text (a Fail message, a cancel reason) is kept, and logged escaped.
        for (i, brk) in BREAKS.iter().enumerate() {
            let id = format!("fail-{i}");
            put(
                &mut c,
                pb::JobSpec {
                    max_attempts: Some(1),
                    ..job(&queue, &id)
                },
            )
            .await;
            let mut s = c.subscribe(&[&queue], 1).await.expect("subscribe");
            let l = s.lease().await;
            s.send(In::Fail(pb::FailRequest {
                queue: queue.clone(),
                job_id: id.clone(),
                lease_token: l.lease_token,
                disposition: pb::FailDisposition::Retry as i32,
                error: Some(pb::JobError {
                    message: format!("boom{brk}{FAKE}"),
                    error_type: "Boom".into(),
                    details: String::new(),
                }),
                ..Default::default()
            }));
            match s.next(Duration::from_secs(10)).await {
                Ok(Some(Out::Settled(_))) => {}
                other => panic!("expected the fail to settle, got {other:?}"),
            }
            until(&mut lines, &mut seen, "the failed attempt", |l| {
                l.contains("attempt failed") && l.contains(&format!("fail-{i}"))
            })
            .await;

            let id = format!("cancel-{i}");
            put(&mut c, job(&queue, &id)).await;
            c.jobs
                .cancel_job(pb::CancelJobRequest {
                    queue: queue.clone(),
                    job_id: id,
                    reason: format!("bye{brk}{FAKE}"),
                })
                .await
                .expect("cancel");
            until(&mut lines, &mut seen, "the cancel", |l| {
                l.contains("job cancelled") && l.contains(&format!("cancel-{i}"))
            })
            .await;
        }

        // One real admin action.
        c.queues
            .pause_queue(pb::PauseQueueRequest {
                queue: queue.clone(),
            })
            .await
            .expect("pause");
        until(&mut lines, &mut seen, "the audit line", |l| {
            is_audit(format, l)
        })
        .await;
        // Whatever else was logged meanwhile (a late line of the cancels).
        tokio::time::sleep(Duration::from_millis(300)).await;
        while let Ok(l) = lines.try_recv() {
            seen.push(l);
        }

        let audit: Vec<&String> = seen.iter().filter(|l| is_audit(format, l)).collect();
        assert_eq!(audit.len(), 1, "{format}: only the real action: {audit:#?}");
        assert!(audit[0].contains("pause_queue"), "{}", audit[0]);
        for line in &seen {
            assert!(
                !line.contains(jobwire::telemetry::needs_escape),
                "{format}: a raw control or line-breaking character in {line:?}"
            );
        }
        let fails = seen.iter().filter(|l| l.contains("attempt failed")).count();
        assert_eq!(fails, BREAKS.len(), "{format}: one line per failed attempt");
        assert!(
            seen.iter()
                .any(|l| l.replace("\\\\", "\\").contains("boom\\u{2028}2026-12-07")),
            "{format}: the message kept, escaped: {seen:#?}"
        );
        child.kill().await.expect("kill");
    }
}
