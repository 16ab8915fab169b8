//! The audit trail, read from the real binary's JSON logs (served over TLS): each admin action (replay,
//! dead-letter delete, purge, pause, resume, config change, queue delete) writes one line
//! with target `jobwire::audit`, the principal, the action, the queue, the filter and the
//! count, and counts one in `jobwire_admin_actions_total{action}` (every action's series is
//! there at 0 from the start); an admin call refused for want of the role writes a `denied`
//! line and counts nothing.

use std::process::Stdio;
use std::time::Duration;

use crate::certs::TestPki;
use crate::harness::{http_get, metric_value, TestRedis};
use crate::secured::*;
use jobwire::pb;
use pb::subscribe_request::Message as In;
use pb::subscribe_response::Message as Out;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

const ACTIONS: [&str; 10] = [
    "replay_dead_letters",
    "delete_dead_letters",
    "purge_queue",
    "pause_queue",
    "resume_queue",
    "update_queue_config",
    "delete_queue",
    "update_group_config",
    "pause_group",
    "resume_group",
];

/// The next audit line (target `jobwire::audit`) from the server's JSON log.
async fn next_audit(lines: &mut mpsc::UnboundedReceiver<Value>) -> Value {
    loop {
        let v = tokio::time::timeout(Duration::from_secs(10), lines.recv())
            .await
            .expect("an audit line within 10 s")
            .expect("jobwire is running");
        if v["target"] == "jobwire::audit" {
            return v;
        }
    }
}

#[tokio::test]
async fn every_admin_action_is_logged_and_counted() {
    let ops = Who::new(
        "ops-oncall",
        &[(&["audit-*"], &["producer", "worker", "admin"])],
    );
    let viewer = Who::new("dashboard", &[(&["*"], &["viewer"])]);
    let dir = tempfile::tempdir().expect("tempdir");
    let auth_file = dir.path().join("auth.yaml");
    std::fs::write(&auth_file, auth_yaml(&[&ops, &viewer])).expect("write");
    let redis = TestRedis::start().await;
    let pki = TestPki::new("jobwire audit test CA");
    let server = pki.server("server", 1);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_jobwire"))
        .args([
            "serve",
            "--log-format",
            "json",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--redis-url",
            &redis.url,
        ])
        .arg("--auth-file")
        .arg(&auth_file)
        .arg("--tls-cert")
        .arg(&server.cert)
        .arg("--tls-key")
        .arg(&server.key)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn jobwire");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let (tx, mut lines) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    let serving = loop {
        let v = tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .expect("started within 20 s")
            .expect("jobwire exited");
        if v["message"] == "jobwire serving" {
            break v;
        }
    };
    let grpc: std::net::SocketAddr = serving["grpc"]
        .as_str()
        .expect("grpc")
        .parse()
        .expect("addr");
    let http: std::net::SocketAddr = serving["http"]
        .as_str()
        .expect("http")
        .parse()
        .expect("addr");
    let channel = crate::tls_harness::tls_channel(grpc, &pki.ca_path(), None)
        .await
        .expect("tls connect");
    let text = http_get(http, "/metrics").await;
    for a in ACTIONS {
        assert_eq!(
            metric_value(&text, "jobwire_admin_actions_total", &[("action", a)]),
            Some(0.0),
            "{a} at 0 from the start"
        );
    }

    // Two dead letters in audit-q.
    let mut c = Clients::new(&channel, ops.bearer());
    for id in ["d1", "d2"] {
        c.jobs
            .enqueue(pb::EnqueueRequest {
                job: Some(pb::JobSpec {
                    max_attempts: Some(1),
                    ..job("audit-q", id)
                }),
            })
            .await
            .expect("enqueue");
    }
    {
        let mut w = c.subscribe(&["audit-q"], 2).await.expect("subscribe");
        for _ in 0..2 {
            let l = w.lease().await;
            w.send(In::Fail(pb::FailRequest {
                queue: "audit-q".into(),
                job_id: l.job.expect("job").job_id,
                lease_token: l.lease_token,
                disposition: pb::FailDisposition::NoRetry as i32,
                ..Default::default()
            }));
        }
        let mut settled = 0;
        while settled < 2 {
            if let Ok(Some(Out::Settled(s))) = w.next(Duration::from_secs(10)).await {
                assert_eq!(s.code, 0, "{}", s.message);
                settled += 1;
            }
        }
    }

    let r = c
        .dead
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            queue: "audit-q".into(),
            job_ids: vec!["d1".into()],
            filter: None,
        })
        .await
        .expect("replay")
        .into_inner();
    assert_eq!(r.replayed_job_ids, ["d1"]);
    let line = next_audit(&mut lines).await;
    assert_eq!(line["principal"], "ops-oncall");
    assert_eq!(line["via"], "token:ops-oncall");
    assert_eq!(line["action"], "replay_dead_letters");
    assert_eq!(line["queue"], "audit-q");
    assert_eq!(line["filter"], "job_ids(1)");
    assert_eq!(line["count"], 1);
    assert_eq!(line["outcome"], "done");

    c.dead
        .delete_dead_letters(pb::DeleteDeadLettersRequest {
            queue: "audit-q".into(),
            job_ids: Vec::new(),
            filter: Some(pb::DeadLetterFilter {
                job_name: "test-job".into(),
                reason: pb::DeadReason::NoRetry as i32,
                ..Default::default()
            }),
        })
        .await
        .expect("delete dead letters");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "delete_dead_letters");
    // The fields set, as the dashboard prints a filter (not a Rust debug dump).
    assert_eq!(
        line["filter"], r#"job_name="test-job" reason="no_retry""#,
        "{line}"
    );
    assert_eq!(line["count"], 1);

    c.queues
        .pause_queue(pb::PauseQueueRequest {
            queue: "audit-q".into(),
        })
        .await
        .expect("pause");
    assert_eq!(next_audit(&mut lines).await["action"], "pause_queue");
    c.queues
        .resume_queue(pb::ResumeQueueRequest {
            queue: "audit-q".into(),
        })
        .await
        .expect("resume");
    assert_eq!(next_audit(&mut lines).await["action"], "resume_queue");
    c.queues
        .update_queue_config(pb::UpdateQueueConfigRequest {
            queue: "audit-q".into(),
            config: Some(pb::QueueConfig {
                default_max_attempts: Some(4),
                ..Default::default()
            }),
            update_mask: None,
        })
        .await
        .expect("config");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "update_queue_config");
    assert_eq!(line["filter"], "fields=default_max_attempts");
    let purged = c
        .queues
        .purge_queue(pb::PurgeQueueRequest {
            queue: "audit-q".into(),
            include_completed: true,
            include_dead: true,
        })
        .await
        .expect("purge")
        .into_inner()
        .deleted;
    assert_eq!(purged, 1, "the replayed d1");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "purge_queue");
    assert_eq!(line["filter"], "include_completed=true include_dead=true");
    assert_eq!(line["count"], 1);

    // A group's config, pause and resume (issue 16).
    c.groups
        .update_group_config(pb::UpdateGroupConfigRequest {
            queue: "audit-q".into(),
            group_key: "tenant-1".into(),
            config: Some(pb::GroupConfig {
                weight: Some(2),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["weight".into()],
            }),
        })
        .await
        .expect("update group config");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "update_group_config");
    assert_eq!(line["filter"], "group=tenant-1 fields=weight");
    c.groups
        .pause_group(pb::PauseGroupRequest {
            queue: "audit-q".into(),
            group_key: "tenant-1".into(),
            duration: None,
        })
        .await
        .expect("pause group");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "pause_group");
    assert_eq!(line["filter"], "group=tenant-1");
    c.groups
        .resume_group(pb::ResumeGroupRequest {
            queue: "audit-q".into(),
            group_key: "tenant-1".into(),
        })
        .await
        .expect("resume group");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "resume_group");
    assert_eq!(line["count"], 1);

    // Denied: the viewer tries a delete. One line, not counted. The viewer is admin of no
    // queue, so the call is refused before its request is read: the queue is not known.
    let mut v = Clients::new(&channel, viewer.bearer());
    let st = v
        .queues
        .delete_queue(pb::DeleteQueueRequest {
            queue: "audit-q".into(),
            force: true,
        })
        .await
        .expect_err("a viewer may not delete");
    assert_eq!(st.code(), tonic::Code::PermissionDenied);
    let line = next_audit(&mut lines).await;
    assert_eq!(line["outcome"], "denied");
    assert_eq!(line["principal"], "dashboard");
    assert_eq!(line["action"], "delete_queue");
    assert_eq!(line["queue"], "");
    // An admin of other queues is refused by the handler, which names the queue.
    let st = c
        .queues
        .delete_queue(pb::DeleteQueueRequest {
            queue: "elsewhere".into(),
            force: true,
        })
        .await
        .expect_err("not an admin of elsewhere");
    assert_eq!(st.code(), tonic::Code::PermissionDenied);
    let line = next_audit(&mut lines).await;
    assert_eq!(line["outcome"], "denied");
    assert_eq!(line["principal"], "ops-oncall");
    assert_eq!(line["action"], "delete_queue");
    assert_eq!(line["queue"], "elsewhere");

    c.queues
        .delete_queue(pb::DeleteQueueRequest {
            queue: "audit-q".into(),
            force: true,
        })
        .await
        .expect("delete queue");
    let line = next_audit(&mut lines).await;
    assert_eq!(line["action"], "delete_queue");
    assert_eq!(line["outcome"], "done");
    assert_eq!(line["filter"], "force=true");

    let text = http_get(http, "/metrics").await;
    for a in ACTIONS {
        assert_eq!(
            metric_value(&text, "jobwire_admin_actions_total", &[("action", a)]),
            Some(1.0),
            "{a} counted once (the denied delete not at all)"
        );
    }
    let _ = child.start_kill();
}
