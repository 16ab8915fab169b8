//! `jobwire dlq ...`: the dead-letter incident of the README, end to end. A real worker (the
//! Rust SDK's `Worker`) kills jobs with two kinds of errors; the CLI lists them by error
//! type, shows one, replays the retryable ones by filter (after a dry run and a refused
//! prompt, neither of which changes anything) and deletes the rest; every step is checked
//! through gRPC.
//!
//! With `JOBWIRE_CLI_TRANSCRIPT=<file>` the test also writes the table output of the
//! walkthrough's commands to that file: the README's transcript comes from it.

use std::time::Duration;

use jobwire_client::{
    pb, Client, Ctx, EnqueueOptions, Job, JobError, NewJob, Payload, Worker, WorkerOptions,
};
use unicode_width::UnicodeWidthStr;

use crate::harness::*;

const Q: &str = "emails";

/// Enqueues the incident's jobs: `timeouts` whose SMTP relay times out (retryable) and
/// `bad` with an invalid address (not retryable), one attempt each, and runs a worker until
/// all are dead.
pub async fn make_incident(c: &Client, timeouts: usize, bad: usize) {
    for i in 0..timeouts + bad {
        let (id, to) = if i < timeouts {
            (format!("welcome-{i:03}"), format!("user{i}@example.com"))
        } else {
            (format!("welcome-{i:03}"), format!("user{i}@@example"))
        };
        c.enqueue(
            Q,
            "send-welcome-email",
            Payload::json(&serde_json::json!({ "to": to })).expect("json"),
            EnqueueOptions {
                job_id: Some(id),
                max_attempts: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("enqueue");
    }
    let mut w = Worker::new(
        c.clone(),
        WorkerOptions {
            queues: vec![Q.into()],
            concurrency: 1,
            worker_id: Some("mailer-1".into()),
            handle_signals: false,
            grace: Duration::from_secs(5),
            ..Default::default()
        },
    );
    w.handle(
        "send-welcome-email",
        |job: Job<serde_json::Value>, _ctx: Ctx| async move {
            let to = job.payload["to"].as_str().unwrap_or_default().to_owned();
            if to.contains("@@") {
                Err(JobError::non_retryable(format!("invalid address {to:?}")))
            } else {
                Err(JobError::failed(
                    "smtp_timeout",
                    "503 smtp.example.com: connection timed out after 30s",
                ))
            }
        },
    );
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    let total = (timeouts + bad) as u64;
    eventually("every job dead", || async {
        stats(c, Q).await.dead == total
    })
    .await;
    stop.cancel();
    run.await.expect("join").expect("worker ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_incident_list_show_replay_and_delete() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    make_incident(&c, 3, 2).await;
    let mut transcript = String::new();
    let mut show = |cmd: &[&str], out: &Out| {
        transcript.push_str(&format!("$ jobwire {}\n{}\n", cmd.join(" "), out.stdout));
    };

    // The alert: dead jobs on emails.
    let cmd = ["queues", "list"];
    let out = s.jw(&cmd);
    out.code(0);
    show(&cmd, &out);
    assert!(
        out.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("emails ")),
        "{}",
        out.stdout
    );

    // List by error type: JSON for the check, the table for the README.
    let cmd = ["dlq", "list", Q, "--error-type", "smtp_timeout"];
    let table = s.jw(&cmd);
    table.code(0);
    show(&cmd, &table);
    for line in table.stdout.lines() {
        assert!(line.width() <= 100, "{line}");
    }
    let v = s.jw(&[&cmd[..], &["-o", "json"]].concat()).ok_json();
    let mut ids: Vec<&str> = v["dead_letters"]
        .as_array()
        .expect("list")
        .iter()
        .map(|j| j["job_id"].as_str().expect("id"))
        .collect();
    ids.sort();
    assert_eq!(ids, ["welcome-000", "welcome-001", "welcome-002"]);
    assert_eq!(v["next_page_token"], "");
    assert_eq!(v["dead_letters"][0]["dead_reason"], "attempts_exhausted");
    let all = s.jw(&["dlq", "list", Q, "-o", "json"]).ok_json();
    assert_eq!(all["dead_letters"].as_array().expect("list").len(), 5);
    let by_reason = s
        .jw(&["dlq", "list", Q, "--reason", "no_retry", "-o", "json"])
        .ok_json();
    assert_eq!(by_reason["dead_letters"].as_array().expect("list").len(), 2);
    let prefix = s
        .jw(&[
            "dlq",
            "list",
            Q,
            "--message-prefix",
            "503",
            "--dead-after",
            "1h",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(prefix["dead_letters"].as_array().expect("list").len(), 3);
    let none = s
        .jw(&["dlq", "list", Q, "--dead-before", "1h", "-o", "json"])
        .ok_json();
    assert_eq!(
        none["dead_letters"].as_array().expect("list").len(),
        0,
        "nothing died an hour ago"
    );
    let paged = s
        .jw(&["dlq", "list", Q, "--limit", "2", "-o", "json"])
        .ok_json();
    assert_eq!(paged["dead_letters"].as_array().expect("list").len(), 2);
    let token = paged["next_page_token"].as_str().expect("token").to_owned();
    assert!(!token.is_empty());
    let rest = s
        .jw(&[
            "dlq",
            "list",
            Q,
            "--limit",
            "0",
            "--page-token",
            &token,
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(rest["dead_letters"].as_array().expect("list").len(), 3);
    // A page that exactly fills --limit: the token may lead to an empty page; say so.
    let full = s.jw(&["dlq", "list", Q, "--limit", "5"]);
    full.code(0);
    assert!(
        full.stdout
            .contains(" or --limit 0; the next page may be empty)\n"),
        "{}",
        full.stdout
    );

    // Show one: the history with the worker's error.
    let cmd = ["dlq", "show", Q, "welcome-001"];
    let out = s.jw(&cmd);
    out.code(0);
    show(&cmd, &out);
    let cmd = [&cmd[..], &["-o", "json"]].concat();
    let out = s.jw(&cmd);
    show(&cmd, &out);
    let j = out.ok_json();
    assert_eq!(j["state"], "dead");
    assert_eq!(j["payload"], r#"{"to":"user1@example.com"}"#);
    assert_eq!(j["errors"][0]["error_type"], "smtp_timeout");
    assert_eq!(j["errors"][0]["worker_id"], "mailer-1");
    assert_eq!(j["errors"][0]["disposition"], "retry");
    assert!(j["finish_time"]
        .as_str()
        .expect("finish_time")
        .ends_with('Z'));

    // Replay the retryable ones: a dry run first (nothing changes), then without --yes on a
    // non-terminal stdin (refused, exit 2, nothing changes), then for real.
    let cmd = [
        "dlq",
        "replay",
        Q,
        "--error-type",
        "smtp_timeout",
        "--dry-run",
    ];
    let out = s.jw(&cmd);
    out.code(0);
    show(&cmd, &out);
    let d = s.jw(&[&cmd[..], &["-o", "json"]].concat()).ok_json();
    assert_eq!(d["count"], 3);
    assert_eq!(d["dry_run"], true);
    let mut first: Vec<&str> = d["first_job_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_str().expect("id"))
        .collect();
    first.sort();
    assert_eq!(first, ["welcome-000", "welcome-001", "welcome-002"]);
    assert_eq!(stats(&c, Q).await.dead, 5, "a dry run changes nothing");
    let refused = s.jw(&["dlq", "replay", Q, "--error-type", "smtp_timeout"]);
    refused.code(2);
    assert!(refused.stderr.contains("add --yes"), "{}", refused.stderr);
    assert_eq!(
        stats(&c, Q).await.dead,
        5,
        "a refused prompt changes nothing"
    );
    let cmd = ["dlq", "replay", Q, "--error-type", "smtp_timeout", "--yes"];
    let out = s.jw(&cmd);
    out.code(0);
    show(&cmd, &out);
    assert_eq!(
        out.stdout,
        "Replayed 3 dead jobs of queue emails (0 skipped: not dead or not found).\n"
    );
    for id in ["welcome-000", "welcome-001", "welcome-002"] {
        let job = c.get_job(Q, id).await.expect("get");
        assert_eq!(job.state, pb::JobState::Waiting as i32, "{id}");
        assert_eq!(job.replays, 1, "{id}");
    }

    // Delete the rest (the invalid addresses): by reason, dry run first.
    let d = s
        .jw(&[
            "dlq",
            "delete",
            Q,
            "--reason",
            "no_retry",
            "--dry-run",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(d["count"], 2);
    s.jw(&["dlq", "delete", Q, "--reason", "no_retry"]).code(2);
    assert_eq!(stats(&c, Q).await.dead, 2);
    let cmd = ["dlq", "delete", Q, "--reason", "no_retry", "--yes"];
    let out = s.jw(&cmd);
    out.code(0);
    show(&cmd, &out);
    assert_eq!(
        out.stdout,
        "Deleted 2 dead jobs of queue emails (0 skipped: not dead or not found).\n"
    );
    let cmd = ["queues", "stats", Q];
    let out = s.jw(&cmd);
    out.code(0);
    show(&cmd, &out);
    let st = stats(&c, Q).await;
    assert_eq!((st.dead, st.waiting), (0, 3));
    for id in ["welcome-003", "welcome-004"] {
        let e = c.get_job(Q, id).await.expect_err("deleted");
        assert_eq!(e.code(), Some(tonic::Code::NotFound), "{id}");
    }
    let nf = s.jw(&["dlq", "show", Q, "welcome-003"]);
    nf.code(3);
    assert!(
        nf.stderr.starts_with("jobwire: NOT_FOUND: "),
        "{}",
        nf.stderr
    );

    if let Some(path) = std::env::var_os("JOBWIRE_CLI_TRANSCRIPT") {
        std::fs::write(path, &transcript).expect("write the transcript");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_delete_by_id_report_skipped_ids_and_refuse_ids_with_a_filter() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    make_incident(&c, 2, 0).await;
    // A dry run by id checks each id: the count is what the action would do.
    let d = s
        .jw(&[
            "dlq",
            "replay",
            Q,
            "welcome-000",
            "nobody",
            "--dry-run",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(d["count"], 1);
    assert_eq!(d["first_job_ids"], serde_json::json!(["welcome-000"]));
    assert_eq!(d["not_dead_job_ids"], serde_json::json!([]));
    assert_eq!(d["not_found_job_ids"], serde_json::json!(["nobody"]));
    let t = s.jw(&["dlq", "replay", Q, "welcome-000", "nobody", "--dry-run"]);
    t.code(0);
    assert!(
        t.stdout.contains("Not found (would be skipped): nobody\n"),
        "{}",
        t.stdout
    );
    assert_eq!(stats(&c, Q).await.dead, 2);
    // An id that is not dead is skipped, not an error.
    let v = s
        .jw(&[
            "dlq",
            "replay",
            Q,
            "welcome-000",
            "nobody",
            "--yes",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(v["replayed"], 1);
    assert_eq!(v["skipped"], 1);
    assert_eq!(v["replayed_job_ids"], serde_json::json!(["welcome-000"]));
    assert_eq!(v["skipped_job_ids"], serde_json::json!(["nobody"]));
    // welcome-000 is waiting now: a dry run names it not dead; the action skips both
    // kinds alike (the RPC cannot tell them apart), and says so.
    let d = s
        .jw(&[
            "dlq",
            "replay",
            Q,
            "welcome-000",
            "nobody",
            "--dry-run",
            "-o",
            "json",
        ])
        .ok_json();
    assert_eq!(d["count"], 0);
    assert_eq!(d["not_dead_job_ids"], serde_json::json!(["welcome-000"]));
    assert_eq!(d["not_found_job_ids"], serde_json::json!(["nobody"]));
    let t = s.jw(&["dlq", "replay", Q, "welcome-000", "nobody", "--yes"]);
    t.code(0);
    assert_eq!(
        t.stdout,
        "Replayed 0 dead jobs of queue emails (2 skipped: not dead or not found).\n"
    );
    let d = s
        .jw(&["dlq", "delete", Q, "welcome-001", "--dry-run", "-o", "json"])
        .ok_json();
    assert_eq!(d["count"], 1);
    assert_eq!(stats(&c, Q).await.dead, 1);
    let v = s.jw(&["dlq", "delete", Q, "welcome-001", "-y"]);
    v.code(0);
    assert_eq!(
        v.stdout,
        "Deleted 1 dead job of queue emails (0 skipped: not dead or not found).\n"
    );
    let st = stats(&c, Q).await;
    assert_eq!((st.dead, st.waiting), (0, 1));
    // Nothing matches: nothing to confirm, exit 0.
    let v = s
        .jw(&["dlq", "replay", Q, "--job-name", "nothing", "-o", "json"])
        .ok_json();
    assert_eq!(v["replayed"], 0);
    let t = s.jw(&["dlq", "delete", Q, "--job-name", "nothing"]);
    t.code(0);
    assert_eq!(
        t.stdout,
        "Nothing matches: no dead job of queue emails to delete.\n"
    );
    // Ids and a filter together, or a bad time: usage, exit 2.
    let r = s.jw(&[
        "dlq",
        "replay",
        Q,
        "welcome-000",
        "--error-type",
        "x",
        "--yes",
    ]);
    r.code(2);
    assert!(r.stderr.contains("not both"), "{}", r.stderr);
    let r = s.jw(&["dlq", "list", Q, "--dead-after", "last tuesday"]);
    r.code(2);
    assert!(r.stderr.contains("--dead-after"), "{}", r.stderr);
    // RFC 3339 without a zone: local time or UTC? Refused, not guessed.
    let r = s.jw(&["dlq", "list", Q, "--dead-after", "2026-12-02T04:00:00"]);
    r.code(2);
    assert!(
        r.stderr
            .contains("--dead-after \"2026-12-02T04:00:00\": no time zone"),
        "{}",
        r.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_of_more_than_one_chunk_pages_and_replays_every_job() {
    let s = Server::start(&[]).await;
    let c = s.client().await;
    let n = 1_100; // more than one ListDeadLetters page and one ReplayDeadLetters chunk
    for start in (0..n).step_by(550) {
        let jobs: Vec<NewJob> = (start..start + 550)
            .map(|i| {
                NewJob::new(
                    "bulk",
                    "doomed",
                    Payload::bytes(Vec::new()),
                    EnqueueOptions {
                        job_id: Some(format!("b-{i:04}")),
                        max_attempts: Some(1),
                        ..Default::default()
                    },
                )
            })
            .collect();
        for r in c.enqueue_batch(jobs).await.expect("batch") {
            r.expect("item");
        }
    }
    let mut w = Worker::new(
        c.clone(),
        WorkerOptions {
            queues: vec!["bulk".into()],
            concurrency: 100,
            handle_signals: false,
            grace: Duration::from_secs(5),
            ..Default::default()
        },
    );
    w.handle_bytes("doomed", |_job: Job<Vec<u8>>, _ctx: Ctx| async move {
        Err(JobError::non_retryable("doomed"))
    });
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    eventually("every job dead", || async {
        stats(&c, "bulk").await.dead == n as u64
    })
    .await;
    stop.cancel();
    run.await.expect("join").expect("worker ran");

    let d = s
        .jw(&["dlq", "replay", "bulk", "--dry-run", "-o", "json"])
        .ok_json();
    assert_eq!(d["count"], n);
    assert_eq!(d["first_job_ids"].as_array().expect("ids").len(), 10);
    let v = s
        .jw(&["dlq", "replay", "bulk", "--yes", "-o", "json"])
        .ok_json();
    assert_eq!(v["replayed"], n);
    let mut ids: Vec<&str> = v["replayed_job_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_str().expect("id"))
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "every job once");
    let st = stats(&c, "bulk").await;
    assert_eq!((st.dead, st.waiting), (0, n as u64));
}
