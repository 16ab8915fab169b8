//! `jobwire jobs list` (ListJobs) and `jobwire workers list` (ListWorkers).

use std::time::Duration;

use jobwire_client::{Ctx, EnqueueOptions, Job, JobError, Payload, Worker, WorkerOptions};
use unicode_width::UnicodeWidthStr;

use crate::harness::*;

fn ids(v: &serde_json::Value, key: &str, id: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: {v}"))
        .iter()
        .map(|j| j[id].as_str().expect("id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_list_by_state_name_time_and_pages() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    enqueue_n(&c, "emails", "send-welcome-email", "w", 3).await;
    c.enqueue(
        "emails",
        "send-digest",
        Payload::bytes(b"x".to_vec()),
        EnqueueOptions {
            job_id: Some("digest-1".into()),
            priority: 10,
            ..Default::default()
        },
    )
    .await
    .expect("enqueue");
    c.enqueue(
        "emails",
        "send-welcome-email",
        Payload::bytes(b"x".to_vec()),
        EnqueueOptions {
            job_id: Some("later".into()),
            delay: Some(Duration::from_secs(3600)),
            ..Default::default()
        },
    )
    .await
    .expect("enqueue");

    // Waiting (the default state), in lease order: priority 10 first, then FIFO.
    let v = s.jw(&["jobs", "list", "emails", "-o", "json"]).ok_json();
    assert_eq!(ids(&v, "jobs", "job_id"), ["digest-1", "w-0", "w-1", "w-2"]);
    assert_eq!(v["next_page_token"], "");
    assert_eq!(v["jobs"][0]["state"], "waiting");
    // By name; delayed; a time window on the due time.
    let v = s
        .jw(&[
            "jobs",
            "list",
            "emails",
            "--name",
            "send-digest",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(ids(&v, "jobs", "job_id"), ["digest-1"]);
    let v = s
        .jw(&["jobs", "list", "emails", "--state", "delayed", "-o", "json"])
        .ok_json();
    assert_eq!(ids(&v, "jobs", "job_id"), ["later"]);
    let v = s
        .jw(&[
            "jobs",
            "list",
            "emails",
            "--state",
            "delayed",
            "--before",
            "2026-01-01T00:00:00Z",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(ids(&v, "jobs", "job_id"), Vec::<String>::new());
    // Pages: --limit, then --page-token for the rest.
    let v = s
        .jw(&["jobs", "list", "emails", "--limit", "3", "-o", "json"])
        .ok_json();
    assert_eq!(ids(&v, "jobs", "job_id").len(), 3);
    let token = v["next_page_token"].as_str().expect("token").to_owned();
    assert!(!token.is_empty());
    let v = s
        .jw(&[
            "jobs",
            "list",
            "emails",
            "--page-token",
            &token,
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(ids(&v, "jobs", "job_id"), ["w-2"]);
    // The table fits and says where to go on.
    let t = s.jw(&["jobs", "list", "emails", "--limit", "2"]);
    t.code(0);
    assert!(t.stdout.starts_with("JOB_ID "), "{}", t.stdout);
    assert!(t.stdout.contains("--page-token"), "{}", t.stdout);
    for line in t.stdout.lines() {
        assert!(line.width() <= 100, "{line}");
    }
    // An empty list says so under the header.
    let t = s.jw(&["jobs", "list", "emails", "--name", "no-such-job"]);
    t.code(0);
    assert!(t.stdout.ends_with("(no job matches)\n"), "{}", t.stdout);
    let t = s.jw(&["dlq", "list", "emails", "--job-name", "no-such-job"]);
    t.code(0);
    assert!(
        t.stdout.ends_with("(no dead job matches)\n"),
        "{}",
        t.stdout
    );
    // Bad input: a state clap does not know, a time that is not one (exit 2); a page token
    // the server did not make (exit 1, INVALID_ARGUMENT).
    s.jw(&["jobs", "list", "emails", "--state", "sleeping"])
        .code(2);
    s.jw(&["jobs", "list", "emails", "--after", "noon"]).code(2);
    let r = s.jw(&["jobs", "list", "emails", "--page-token", "nonsense"]);
    r.code(1);
    assert!(
        r.stderr.starts_with("jobwire: INVALID_ARGUMENT: "),
        "{}",
        r.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_list_shows_a_running_worker_and_its_held_lease() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    enqueue_n(&c, "emails", "slow", "j", 1).await;
    let mut w = Worker::new(
        c.clone(),
        WorkerOptions {
            queues: vec!["emails".into()],
            concurrency: 3,
            worker_id: Some("mailer-7".into()),
            handle_signals: false,
            grace: Duration::from_secs(1),
            ..Default::default()
        },
    );
    let release = jobwire_client::CancellationToken::new();
    let r2 = release.clone();
    w.handle("slow", move |_job: Job<serde_json::Value>, ctx: Ctx| {
        let r2 = r2.clone();
        async move {
            tokio::select! {
                _ = r2.cancelled() => Ok(()),
                _ = ctx.cancel.cancelled() => Err(JobError::failed("stopped", "stopped")),
            }
        }
    });
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    eventually("the job is held", || async {
        stats(&c, "emails").await.active == 1
    })
    .await;

    let v = s.jw(&["workers", "list", "-o", "json"]).ok_json();
    let streams = v["streams"].as_array().expect("streams");
    let w = streams
        .iter()
        .find(|w| w["worker_id"] == "mailer-7")
        .unwrap_or_else(|| panic!("mailer-7 listed: {v}"));
    assert_eq!(w["queues"], serde_json::json!(["emails"]));
    assert_eq!(w["held_leases"], 1);
    assert_eq!(w["leases"][0]["job_id"], "j-0");
    assert_eq!(w["credits"], 2);
    assert!(w["last_heard_time"].as_str().expect("time").ends_with('Z'));
    assert!(v["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .any(|r| r["answered"] == true));
    // A known queue no worker leases from: no streams; an unknown one: exit 3.
    s.jw(&["workers", "list", "--queue", "other"]).code(3);
    s.jw(&["queues", "pause", "other", "--create"]).code(0);
    let v = s
        .jw(&["workers", "list", "--queue", "other", "-o", "json"])
        .ok_json();
    assert_eq!(v["streams"], serde_json::json!([]));
    let t = s.jw(&["workers", "list"]);
    t.code(0);
    assert!(t.stdout.contains("mailer-7"), "{}", t.stdout);
    for line in t.stdout.lines() {
        assert!(line.width() <= 100, "{line}");
    }

    release.cancel();
    stop.cancel();
    run.await.expect("join").expect("worker ran");
}
